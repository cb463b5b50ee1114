// Normalizers: Sequence, Prepend, Replace (literal pattern), Strip, and NFC as a pass-through.
#include "model/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "model/loader/model_error.h"
#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {
namespace {

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view with) {
  if (pattern.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(pattern, pos)) != std::string_view::npos;
       pos = hit + pattern.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(with);
  }
  out.append(text.substr(pos));
  return out;
}

std::string_view strip_whitespace(std::string_view text, bool left, bool right) {
  if (left) {
    while (!text.empty()) {
      const unicode::DecodedChar c = unicode::decode_utf8(text, 0);
      if (!unicode::is_whitespace(c.cp)) break;
      text.remove_prefix(c.num_bytes);
    }
  }
  if (right) {
    // Step back over continuation bytes to the start of the last character and test it.
    while (!text.empty()) {
      size_t start = text.size() - 1;
      while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      const unicode::DecodedChar c = unicode::decode_utf8(text, start);
      if (!unicode::is_whitespace(c.cp)) break;
      text.remove_suffix(text.size() - start);
    }
  }
  return text;
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& config) {
  Normalizer normalizer;
  if (!config.is_null()) normalizer.add_steps(config);
  return normalizer;
}

void Normalizer::add_steps(const nlohmann::json& config) {
  const std::string type = config.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& child : config.at("normalizers")) add_steps(child);
  } else if (type == "Prepend") {
    steps_.push_back({Kind::kPrepend, "", config.at("prepend").get<std::string>()});
  } else if (type == "Replace") {
    const auto& pattern = config.at("pattern");
    if (!pattern.contains("String")) {
      throw ModelError("unsupported normalizer: Replace with a regex pattern");
    }
    steps_.push_back({Kind::kReplace, pattern.at("String").get<std::string>(),
                      config.at("content").get<std::string>()});
  } else if (type == "Strip") {
    steps_.push_back({Kind::kStrip, "", "", config.value("strip_left", true),
                      config.value("strip_right", true)});
  } else if (type == "NFC") {
    // Accepted as a no-op: text arriving over the API is almost always NFC already, and full
    // composition tables are not worth carrying for the rare decomposed input.
  } else {
    throw ModelError("unsupported normalizer type \"" + type + "\"");
  }
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kPrepend:
        // As HF: an empty string stays empty (no lone "▁" for empty input).
        if (!out.empty()) out.insert(0, step.content);
        break;
      case Kind::kReplace:
        out = replace_all(out, step.pattern, step.content);
        break;
      case Kind::kStrip:
        out = std::string(strip_whitespace(out, step.strip_left, step.strip_right));
        break;
    }
  }
  return out;
}

}  // namespace pagedserve::model::tokenizer
