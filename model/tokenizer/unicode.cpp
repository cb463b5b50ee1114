// Unicode lookups (category, whitespace) and UTF-8 encoding/decoding for the tokenizer.
#include <algorithm>

#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer::unicode {

Category category(char32_t cp) {
  // ASCII dominates real text: answer it without the binary search.
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    return kOther;
  }
  const CategoryRange* end = kCategoryRanges + kNumCategoryRanges;
  const CategoryRange* it = std::upper_bound(
      kCategoryRanges, end, cp, [](char32_t c, const CategoryRange& r) { return c < r.first; });
  if (it == kCategoryRanges) return kOther;
  --it;
  return cp <= it->last ? it->category : kOther;
}

bool is_punctuation(char32_t cp) {
  const CodePointRange* end = kPunctuationRanges + kNumPunctuationRanges;
  const CodePointRange* it = std::upper_bound(
      kPunctuationRanges, end, cp, [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return it != kPunctuationRanges && cp <= (it - 1)->last;
}

bool is_whitespace(char32_t cp) {
  // The Unicode White_Space property (what Rust's regex `\s` and char::is_whitespace use).
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

DecodedChar decode_utf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  size_t len = 0;
  char32_t cp = 0;
  if ((lead & 0xE0) == 0xC0) {
    len = 2, cp = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3, cp = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    len = 4, cp = lead & 0x07;
  } else {
    return {0xFFFD, 1};
  }
  if (pos + len > text.size()) return {0xFFFD, 1};
  for (size_t i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid as strict decoders say.
  static constexpr char32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return {0xFFFD, 1};
  }
  return {cp, len};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const DecodedChar c = decode_utf8(text, pos);
    if (c.cp == 0xFFFD && c.num_bytes == 1 && static_cast<unsigned char>(text[pos]) >= 0x80) {
      return false;
    }
    pos += c.num_bytes;
  }
  return true;
}

}  // namespace pagedserve::model::tokenizer::unicode
