// Pre-tokenizers. Each step maps every current word to zero or more new words, as HF's
// PreTokenizedString::split does; empty words are dropped.
#include "model/tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "model/loader/model_error.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {
namespace {

void push_nonempty(std::vector<std::string>& out, std::string_view word) {
  if (!word.empty()) out.emplace_back(word);
}

// Digits: each numeric character alone (individual) or each run of them, isolated from the
// text around it. "Numeric" is Unicode N*, as Rust's char::is_numeric.
void split_digits(std::string_view word, bool individual, std::vector<std::string>& out) {
  size_t piece_start = 0;
  bool piece_is_digits = false;
  for (size_t pos = 0; pos < word.size();) {
    const unicode::DecodedChar c = unicode::decode_utf8(word, pos);
    const bool digit = unicode::is_number(c.cp);
    if (digit != piece_is_digits || (digit && individual)) {
      push_nonempty(out, word.substr(piece_start, pos - piece_start));
      piece_start = pos;
      piece_is_digits = digit;
    }
    pos += c.num_bytes;
  }
  push_nonempty(out, word.substr(piece_start));
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config) {
  PreTokenizer pre_tokenizer;
  if (!config.is_null()) pre_tokenizer.add_steps(config);
  return pre_tokenizer;
}

void PreTokenizer::add_steps(const nlohmann::json& config) {
  const std::string type = config.at("type").get<std::string>();
  Step step{};
  if (type == "Sequence") {
    for (const auto& child : config.at("pretokenizers")) add_steps(child);
    return;
  } else if (type == "Digits") {
    step.kind = Kind::kDigits;
    step.individual_digits = config.value("individual_digits", false);
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    step.add_prefix_space = config.value("add_prefix_space", false);
    step.use_regex = config.value("use_regex", true);
  } else if (type == "Split") {
    step.kind = Kind::kSplit;
    const auto& pattern = config.at("pattern");
    const std::string regex =
        pattern.contains("Regex") ? pattern.at("Regex").get<std::string>() : std::string();
    const std::optional<SplitPattern> known = recognize_split_regex(regex);
    if (!known) {
      throw ModelError(
          "unsupported pre_tokenizer: Split pattern " + pattern.dump() +
          " (only the GPT-2, Llama 3, Qwen2, DeepSeek and one-class regexes are implemented)");
    }
    if (config.value("behavior", "Isolated") != "Isolated" || config.value("invert", false)) {
      throw ModelError("unsupported pre_tokenizer: Split behavior other than Isolated");
    }
    step.pattern = *known;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    step.replacement = config.value("replacement", "\u2581");
    step.split_on_replacement = config.value("split", true);
    const std::string scheme = config.value("prepend_scheme", "");
    if (scheme == "first") {
      step.prepend_scheme = PrependScheme::kFirst;
    } else if (scheme == "never") {
      step.prepend_scheme = PrependScheme::kNever;
    } else if (scheme.empty() && !config.value("add_prefix_space", true)) {
      step.prepend_scheme = PrependScheme::kNever;  // the older form: add_prefix_space only
    }
  } else {
    throw ModelError("unsupported pre_tokenizer type \"" + type + "\"");
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::apply(const Step& step, std::string_view word, bool at_text_start,
                         std::vector<std::string>& out) {
  switch (step.kind) {
    case Kind::kDigits:
      split_digits(word, step.individual_digits, out);
      return;
    case Kind::kSplit:
      for (const auto& [begin, end] : split_by_pattern(word, step.pattern)) {
        push_nonempty(out, word.substr(begin, end - begin));
      }
      return;
    case Kind::kByteLevel: {
      std::string prefixed;
      if (step.add_prefix_space && !word.starts_with(' ')) {
        prefixed = " " + std::string(word);
        word = prefixed;
      }
      const ByteLevelAlphabet& alphabet = byte_level_alphabet();
      if (!step.use_regex) {
        if (!word.empty()) out.push_back(alphabet.encode(word));
        return;
      }
      for (const auto& [begin, end] : split_by_pattern(word, SplitPattern::kGpt2)) {
        out.push_back(alphabet.encode(word.substr(begin, end - begin)));
      }
      return;
    }
    case Kind::kMetaspace: {
      std::string text;
      for (const char c : word) {
        if (c == ' ') {
          text += step.replacement;
        } else {
          text.push_back(c);
        }
      }
      const bool prepend = step.prepend_scheme == PrependScheme::kAlways ||
                           (step.prepend_scheme == PrependScheme::kFirst && at_text_start);
      if (prepend && !text.starts_with(step.replacement)) text.insert(0, step.replacement);
      if (!step.split_on_replacement || step.replacement.empty()) {
        push_nonempty(out, text);
        return;
      }
      // Each word starts at a replacement character (HF's MergedWithNext).
      size_t start = 0;
      for (size_t hit = text.find(step.replacement, 1); hit != std::string::npos;
           hit = text.find(step.replacement, hit + step.replacement.size())) {
        push_nonempty(out, std::string_view(text).substr(start, hit - start));
        start = hit;
      }
      push_nonempty(out, std::string_view(text).substr(start));
      return;
    }
  }
}

void PreTokenizer::pre_tokenize(std::string_view section, bool at_text_start,
                                std::vector<std::string>& words) const {
  if (section.empty()) return;
  if (steps_.empty()) {
    words.emplace_back(section);
    return;
  }
  std::vector<std::string> current{std::string(section)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (size_t i = 0; i < current.size(); ++i) {
      apply(step, current[i], at_text_start && i == 0, next);
    }
    current.swap(next);
  }
  for (std::string& word : current) words.push_back(std::move(word));
}

}  // namespace pagedserve::model::tokenizer
