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
}

}  // namespace
}  // namespace pagedserve::model::tokenizer
