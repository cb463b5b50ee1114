// Unicode classification for the tokenizer: general category (letter / number / other, and
// punctuation separately) from the generated range tables, White_Space as Rust's regex `\s` and
// char::is_whitespace define it, and UTF-8 decoding that never reads past the end and treats a bad
// byte as one code point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagedserve::model::tokenizer::unicode {

enum Category : uint8_t { kOther = 0, kLetter, kNumber };

struct CategoryRange {
  char32_t first;
  char32_t last;
  Category category;
};

extern const CategoryRange kCategoryRanges[];
extern const size_t kNumCategoryRanges;

// \p{P} (general categories P*), which only some pre-tokenizer regexes (DeepSeek's) use; the
// Category above keeps it inside kOther, as [^\s\p{L}\p{N}] needs.
struct CodePointRange {
  char32_t first;
  char32_t last;
};
extern const CodePointRange kPunctuationRanges[];
extern const size_t kNumPunctuationRanges;

Category category(char32_t cp);
inline bool is_letter(char32_t cp) { return category(cp) == kLetter; }
inline bool is_number(char32_t cp) { return category(cp) == kNumber; }
bool is_punctuation(char32_t cp);
bool is_whitespace(char32_t cp);

// One decoded code point and how many bytes it took (1 for an invalid byte, whose value is
// returned as U+FFFD so that callers can still step over it).
struct DecodedChar {
  char32_t cp;
  size_t num_bytes;
};
DecodedChar decode_utf8(std::string_view text, size_t pos);

void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view text);

}  // namespace pagedserve::model::tokenizer::unicode
