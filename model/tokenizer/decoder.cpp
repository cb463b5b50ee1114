// Decoders, each a pass over the list of token strings.
#include "model/tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "model/loader/model_error.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

void replace_all_in_place(std::string& text, const std::string& pattern, const std::string& with) {
  if (pattern.empty() || text.find(pattern) == std::string::npos) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(pattern, pos)) != std::string::npos;
       pos = hit + pattern.size()) {
    out.append(text, pos, hit - pos);
    out += with;
  }
  out.append(text, pos);
  text = std::move(out);
}

// "<0xNN>" -> NN, or -1.
int parse_byte_token(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

// Consecutive byte tokens become one string if they form valid UTF-8, else one U+FFFD per byte
// (unless !lossy: then the bytes as they are).
void byte_fallback(std::vector<std::string>& tokens, bool lossy) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string pending;
  const auto flush = [&] {
    if (pending.empty()) return;
    if (!lossy || unicode::is_valid_utf8(pending)) {
      out.push_back(std::move(pending));
    } else {
      for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementChar);
    }
    pending.clear();
  };
  for (std::string& token : tokens) {
    const int byte = parse_byte_token(token);
    if (byte >= 0) {
      pending.push_back(static_cast<char>(byte));
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  tokens = std::move(out);
}

// Length of the maximal prefix of a well-formed sequence at `pos` (at least 1): what Rust's
// String::from_utf8_lossy and the WHATWG decoder replace with a single U+FFFD.
size_t invalid_sequence_length(std::string_view bytes, size_t pos) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = at(pos);
  const size_t want = lead >= 0xF5 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 1;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead == 0xE0) low = 0xA0;
  if (lead == 0xED) high = 0x9F;
  if (lead == 0xF0) low = 0x90;
  if (lead == 0xF4) high = 0x8F;
  size_t len = 1;
  while (len < want && pos + len < bytes.size()) {
    const unsigned char b = at(pos + len);
    const bool ok = len == 1 ? (b >= low && b <= high) : (b & 0xC0) == 0x80;
    if (!ok) break;
    ++len;
  }
  return len;
}

// Bytes to text, each maximal invalid subsequence becoming one U+FFFD.
std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const unicode::DecodedChar c = unicode::decode_utf8(bytes, pos);
    if (c.cp == 0xFFFD && c.num_bytes == 1 && static_cast<unsigned char>(bytes[pos]) >= 0x80) {
      out += kReplacementChar;
      pos += invalid_sequence_length(bytes, pos);
      continue;
    }
    out.append(bytes.substr(pos, c.num_bytes));
    pos += c.num_bytes;
  }
  return out;
}

}  // namespace

Decoder Decoder::from_json(const nlohmann::json& config) {
  Decoder decoder;
  if (config.is_null()) {
    decoder.join_with_spaces_ = true;
  } else {
    decoder.add_steps(config);
  }
  return decoder;
}

void Decoder::add_steps(const nlohmann::json& config) {
  const std::string type = config.at("type").get<std::string>();
  Step step{};
  if (type == "Sequence") {
    for (const auto& child : config.at("decoders")) add_steps(child);
    return;
  } else if (type == "Replace") {
    const auto& pattern = config.at("pattern");
    if (!pattern.contains("String")) {
      throw ModelError("unsupported decoder: Replace with a regex pattern");
    }
    step.kind = Kind::kReplace;
    step.pattern = pattern.at("String").get<std::string>();
    step.content = config.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    step.content = config.value("content", " ");
    step.strip_start = config.value("start", size_t{0});
    step.strip_stop = config.value("stop", size_t{0});
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    step.pattern = config.value("replacement", "\u2581");
    const std::string scheme = config.value("prepend_scheme", "");
    step.strip_first_space =
        scheme.empty() ? config.value("add_prefix_space", true) : scheme != "never";
  } else {
    throw ModelError("unsupported decoder type \"" + type + "\"");
  }
  steps_.push_back(std::move(step));
}

void Decoder::apply(const Step& step, std::vector<std::string>& tokens, bool lossy) {
  switch (step.kind) {
    case Kind::kReplace:
      for (std::string& token : tokens) replace_all_in_place(token, step.pattern, step.content);
      return;
    case Kind::kByteFallback:
      byte_fallback(tokens, lossy);
      return;
    case Kind::kFuse: {
      std::string fused;
      for (const std::string& token : tokens) fused += token;
      tokens.assign(1, std::move(fused));
      return;
    }
    case Kind::kStrip:
      // Strips up to `start` leading and `stop` trailing copies of `content` from each token.
      for (std::string& token : tokens) {
        const std::string& c = step.content;
        size_t begin = 0;
        for (size_t n = 0; n < step.strip_start && token.compare(begin, c.size(), c) == 0; ++n) {
          begin += c.size();
        }
        size_t end = token.size();
        for (size_t n = 0; n < step.strip_stop && end >= begin + c.size() &&
                           token.compare(end - c.size(), c.size(), c) == 0;
             ++n) {
          end -= c.size();
        }
        token = token.substr(begin, end - begin);
      }
      return;
    case Kind::kByteLevel: {
      // A token outside the byte alphabet (e.g. an added token's text) passes through as is.
      const ByteLevelAlphabet& alphabet = byte_level_alphabet();
      std::string bytes;
      for (const std::string& token : tokens) {
        if (!alphabet.decode(token, bytes)) bytes += token;
      }
      tokens.assign(1, lossy ? utf8_lossy(bytes) : std::move(bytes));
      return;
    }
    case Kind::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        replace_all_in_place(tokens[i], step.pattern, " ");
        if (i == 0 && step.strip_first_space && tokens[i].starts_with(' ')) tokens[i].erase(0, 1);
      }
      return;
  }
}

std::string Decoder::decode(std::vector<std::string> tokens, bool lossy) const {
  std::string text;
  if (join_with_spaces_) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
    return text;
  }
  for (const Step& step : steps_) apply(step, tokens, lossy);
  for (const std::string& token : tokens) text += token;
  return text;
}

}  // namespace pagedserve::model::tokenizer
