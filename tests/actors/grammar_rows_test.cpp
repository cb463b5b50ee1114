// mask_logits against brute force: a token's logit becomes -inf exactly when a copy of the
// matcher rejects it (ids past the grammar's vocabulary: always), and allowed logits are kept,
// on a vocabulary laid out so that the bitmask has all-ones, all-zero, mixed and partial words.
#include "actors/grammar_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/grammar/grammar.h"

namespace pagedserve::actors {
namespace {

namespace g = model::grammar;

// ids 0-31: letters and words (mixed words once digits are down), 32-63: digit strings (one
// word all allowed where digits are), 64-95: punctuation (a word never allowed), 96-99: a
// partial last word.
std::shared_ptr<const g::TokenVocabulary> vocabulary() {
  std::vector<std::string> bytes;
  for (int i = 0; i < 32; ++i)
    bytes.push_back(std::string(1, static_cast<char>('a' + i % 26)) + (i >= 26 ? "x" : ""));
  for (int i = 0; i < 32; ++i) bytes.push_back(std::to_string(i * 7));
  for (int i = 0; i < 32; ++i)
    bytes.push_back(std::string(1, "{}[],:;!?#%&*+-=<>()~^|/@$'._`\\\""[i]));
  for (const char* s : {"9", "a", "{", "99"}) bytes.push_back(s);
  return std::make_shared<const g::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{});
}

TEST(MaskLogits, SetsExactlyTheDisallowedTokensToMinusInfinity) {
  const auto vocab = vocabulary();
  ASSERT_EQ(vocab->size(), 100u);
  const auto compiled =
      g::CompiledGrammar::compile(g::parse_gbnf(R"(root ::= [0-9]+ ("a" | "b")?)"), vocab);
  GrammarRowState state;
  state.matcher.emplace(compiled);
  state.vocab_size = vocab->size();
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  for (const std::string& prefix : {"", "1", "12"}) {
    GrammarRowState at = state;
    ASSERT_TRUE(at.matcher->accept_bytes(prefix)) << prefix;
    std::vector<float> raw(110);  // 10 ids past the vocabulary
    for (float& x : raw) x = normal(rng);
    std::vector<float> logits = raw;
    ASSERT_TRUE(mask_logits(at, logits, 1000));
    int allowed = 0;
    for (int32_t id = 0; id < 110; ++id) {
      bool accepts = false;
      if (id < 100) {
        g::GrammarMatcher copy = *at.matcher;
        accepts = copy.accept_token(id);
      }
      allowed += accepts;
      if (accepts) {
        EXPECT_EQ(logits[id], raw[id]) << "'" << prefix << "' id " << id;
      } else {
        EXPECT_EQ(logits[id], kNever) << "'" << prefix << "' id " << id;
      }
    }
    EXPECT_GT(allowed, 30) << prefix;  // the digit word at least
  }
}

}  // namespace
}  // namespace pagedserve::actors
