// The pre-tokenizer regexes that are one character class, optionally after one whitespace
// character, repeated (`\s?[A-Za-z...]+`, `\p{N}+`, `[\r\n]`, `[0-9][0-9][0-9]`, `\s+$`):
// parsed from their regex text, then searched for leftmost-first matches as Oniguruma (Hugging
// Face) and llama.cpp's splitter find them. Only the syntax those regexes use is accepted.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

namespace pagedserve::model::tokenizer {

class CharClassPattern {
 public:
  // Throws std::invalid_argument for syntax outside the subset (a programming error: the
  // regexes are compiled in).
  static CharClassPattern parse(std::string_view regex);

  // Byte ranges of the matches and of the text between them, tiling `text`.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

  bool contains(char32_t cp) const;

 private:
  struct Range {
    char32_t first;
    char32_t last;
  };
  // The end (in code points) of a match starting at `i`, or 0 when none starts there.
  size_t match_at(const std::vector<char32_t>& chars, size_t i) const;
  size_t class_run(const std::vector<char32_t>& chars, size_t i) const;

  std::vector<Range> ranges_;
  bool letters_ = false;                      // \p{L}
  bool numbers_ = false;                      // \p{N}
  bool punctuation_ = false;                  // \p{P}
  bool whitespace_ = false;                   // \s
  bool optional_leading_whitespace_ = false;  // \s? before the class
  size_t min_count_ = 1;
  size_t max_count_ = 1;  // 0: unbounded (+)
  bool at_end_ = false;   // $: the match must end the text
};

}  // namespace pagedserve::model::tokenizer
