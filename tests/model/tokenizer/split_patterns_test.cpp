// The hand-written pre-tokenizer regex scanners, case by case against what the regexes match.
#include "model/tokenizer/split_patterns.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pagedserve::model::tokenizer {
namespace {

std::vector<std::string> split(std::string_view text, SplitPattern pattern) {
  std::vector<std::string> pieces;
  for (const auto& [begin, end] : split_by_pattern(text, pattern)) {
    pieces.emplace_back(text.substr(begin, end - begin));
  }
  return pieces;
}

using Pieces = std::vector<std::string>;

TEST(SplitPatterns, Gpt2) {
  const auto gpt2 = [](std::string_view text) { return split(text, SplitPattern::kGpt2); };
  EXPECT_EQ(gpt2("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(gpt2("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(gpt2("  hi"), (Pieces{" ", " hi"}));
  EXPECT_EQ(gpt2("x  \n"), (Pieces{"x", "  \n"}));
  EXPECT_EQ(gpt2("don't DON'T"), (Pieces{"don", "'t", " DON", "'", "T"}));
  EXPECT_EQ(gpt2("we'll they're"), (Pieces{"we", "'ll", " they", "'re"}));
  EXPECT_EQ(gpt2("123abc $$ 1"), (Pieces{"123", "abc", " $$", " 1"}));
  EXPECT_EQ(gpt2("caf\u00e9 \u041c\u0438\u0440 \u4f60\u597d"),
            (Pieces{"caf\u00e9", " \u041c\u0438\u0440", " \u4f60\u597d"}));
  EXPECT_EQ(gpt2("x\u00b2 \u0663\u0664"), (Pieces{"x", "\u00b2", " \u0663\u0664"}));
  EXPECT_EQ(gpt2("non\u00a0breaking"), (Pieces{"non", "\u00a0", "breaking"}));
  EXPECT_EQ(gpt2("\xF0\x9F\xA4\x97!"), (Pieces{"\xF0\x9F\xA4\x97!"}));
  EXPECT_EQ(gpt2(""), Pieces{});
}

TEST(SplitPatterns, Llama3) {
  const auto llama3 = [](std::string_view text) { return split(text, SplitPattern::kLlama3); };
  EXPECT_EQ(llama3("Hello, world!\n\nI'M 12345"),
            (Pieces{"Hello", ",", " world", "!\n\n", "I", "'M", " ", "123", "45"}));
  EXPECT_EQ(llama3("a\n\n  b"), (Pieces{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(llama3("'hello \tx"), (Pieces{"'hello", " ", "\tx"}));
  EXPECT_EQ(llama3("x \n y"), (Pieces{"x", " \n", " y"}));
}

TEST(SplitPatterns, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("ab 12345", SplitPattern::kQwen2), (Pieces{"ab", " ", "1", "2", "3", "4", "5"}));
}

TEST(SplitPatterns, RecognizesOnlyKnownRegexes) {
  EXPECT_EQ(recognize_split_regex(
                R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"),
            SplitPattern::kGpt2);
  EXPECT_EQ(recognize_split_regex(R"(\w+)"), std::nullopt);
  for (int p = 0; p <= static_cast<int>(SplitPattern::kThreeAsciiDigits); ++p) {
    const auto pattern = static_cast<SplitPattern>(p);
    EXPECT_EQ(recognize_split_regex(split_regex(pattern)), pattern) << split_regex(pattern);
  }
  EXPECT_EQ(recognize_split_regex(R"(\s?\p{L}+)"), SplitPattern::kDeepseekCoderLetters);
}

// The one-class patterns keep the text between matches as pieces of its own (Isolated).
TEST(SplitPatterns, OneClassPatternsIsolateMatches) {
  using enum SplitPattern;
  EXPECT_EQ(split("Hello  world1x", kDeepseekCoderLetters),
            (Pieces{"Hello", " ", " world", "1", "x"}));
  EXPECT_EQ(split("a, b!? $", kDeepseekCoderPunctuation),  // $ is a symbol, not punctuation
            (Pieces{"a", ",", " b", "!?", " $"}));
  EXPECT_EQ(split("a\r\nb", kLineBreak), (Pieces{"a", "\r", "\n", "b"}));
  EXPECT_EQ(split("ab \t ", kTrailingWhitespace), (Pieces{"ab", " \t "}));
  EXPECT_EQ(split("a b", kTrailingWhitespace), (Pieces{"a b"}));
  EXPECT_EQ(split("12345678", kThreeAsciiDigits), (Pieces{"123", "456", "78"}));
  EXPECT_EQ(split("a+=b|c", kPunctuationAndSymbols), (Pieces{"a", "+=", "b", "|", "c"}));
  EXPECT_EQ(split("a`b", kPunctuationAndSymbols), (Pieces{"a`b"}));
  EXPECT_EQ(split("a`b", kFalconPunctuation), (Pieces{"a", "`", "b"}));
  EXPECT_EQ(split("ab\u4e2d\u6587c", kCjk), (Pieces{"ab", "\u4e2d\u6587", "c"}));
  EXPECT_EQ(split("x12\u0663y", kNumbers), (Pieces{"x", "12\u0663", "y"}));
  // U+3000 is both whitespace and in the class: \s? takes the first, the class the second.
  // (The class's ":-~" includes the ASCII letters, not the digits.)
  EXPECT_EQ(split("\u3000\u3000"
                  "1",
                  kDeepseekLlmPunctuation),
            (Pieces{"\u3000\u3000", "1"}));
  EXPECT_EQ(split("1 ab!", kDeepseekLlmPunctuation), (Pieces{"1", " ab!"}));
  // The explicit letter list: Greek and Latin-1 letters are in, CJK and digits are not.
  EXPECT_EQ(split("\u03b1\u03b2 caf\u00e9\u4e2d7", kDeepseekLlmLetters),
            (Pieces{"\u03b1\u03b2", " caf\u00e9", "\u4e2d7"}));
  EXPECT_EQ(split("", kDeepseekLlmLetters), Pieces{});
}

}  // namespace
}  // namespace pagedserve::model::tokenizer
