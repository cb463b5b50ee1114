// Completing within a budget: min_completion_bytes against a breadth-first search over bytes
// written here, and the budgeted mask against that search for every token of a small vocabulary
// (all strings of one to three letters of the grammars' alphabet), along random walks.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>

#include "model/grammar/grammar.h"
#include "model/grammar/matcher.h"

namespace pagedserve::model::grammar {
namespace {

const std::string kAlphabet = "[],abxyz{}:\" 0123";

// Fewest bytes (from kAlphabet) after which `start` can end; -1 when none within max_depth.
int shortest_completion(const GrammarMatcher& start, int max_depth) {
  if (start.can_end()) return 0;
  std::deque<std::pair<GrammarMatcher, int>> queue{{start, 0}};
  while (!queue.empty()) {
    auto [m, depth] = queue.front();
    queue.pop_front();
    if (depth >= max_depth) continue;
    for (char c : kAlphabet) {
      GrammarMatcher next = m;
      if (!next.accept_bytes(std::string(1, c))) continue;
      if (next.can_end()) return depth + 1;
      queue.emplace_back(std::move(next), depth + 1);
    }
  }
  return -1;
}

std::shared_ptr<const TokenVocabulary> small_vocabulary() {
  std::vector<std::string> tokens{""};  // id 0: the end token
  for (char a : kAlphabet) {
    tokens.push_back(std::string(1, a));
    for (char b : kAlphabet) {
      tokens.push_back(std::string{a, b});
      for (char c : std::string("ab\"]}")) tokens.push_back(std::string{a, b, c});
    }
  }
  return std::make_shared<const TokenVocabulary>(std::move(tokens), std::vector<int32_t>{0});
}

const char* const kGrammars[] = {
    R"(root ::= "[" item ("," item)* "]"
       item ::= [a-b]+ | "xyz")",
    R"(root ::= "{" pair ("," pair){0,3} "}"
       pair ::= "\"" [a-z]{1,4} "\":" value
       value ::= [0-9]+ | "[" (value ("," value)*)? "]" | "\"" [xyz]* "\"")",
    // A string holding any character: its masks take the content tokens at once.
    R"(root ::= "{" "\"" [a-z]{1,4} "\":" "\"" [^"\\]* "\"" ("," "\"b\":" [0-9]+)? "}")",
};

TEST(CompletionBudget, MinCompletionBytesIsTheShortestCompletion) {
  auto vocab = small_vocabulary();
  for (const char* gbnf : kGrammars) {
    SCOPED_TRACE(gbnf);
    auto compiled = CompiledGrammar::compile(parse_gbnf(gbnf), vocab);
    std::mt19937 rng(7);
    for (int walk = 0; walk < 40; ++walk) {
      GrammarMatcher m(compiled);
      for (int step = 0; step < 30 && !m.must_end(); ++step) {
        const int reference = shortest_completion(m, 12);
        if (reference >= 0) EXPECT_EQ(m.min_completion_bytes(), static_cast<size_t>(reference));
        std::string options;
        for (char c : kAlphabet) {
          GrammarMatcher probe = m;
          if (probe.accept_bytes(std::string(1, c))) options += c;
        }
        ASSERT_FALSE(options.empty());
        ASSERT_TRUE(m.accept_bytes(std::string(1, options[rng() % options.size()])));
      }
    }
  }
}

TEST(CompletionBudget, BudgetedMaskKeepsExactlyTheTokensThatStillFit) {
  auto vocab = small_vocabulary();
  const size_t words = bitmask_words(vocab->size());
  for (const char* gbnf : kGrammars) {
    SCOPED_TRACE(gbnf);
    auto compiled = CompiledGrammar::compile(parse_gbnf(gbnf), vocab);
    std::mt19937 rng(11);
    for (int walk = 0; walk < 10; ++walk) {
      GrammarMatcher m(compiled);
      for (int step = 0; step < 12 && !m.must_end(); ++step) {
        std::vector<uint32_t> plain(words), budgeted(words);
        m.fill_next_token_bitmask(plain);
        std::vector<int> rest_after(vocab->size(), -1);  // each allowed token's completion
        for (int32_t id = 0; id < static_cast<int32_t>(vocab->size()); ++id) {
          if (!((plain[id / 32] >> (id % 32)) & 1)) continue;
          GrammarMatcher after = m;
          ASSERT_TRUE(after.accept_token(id));
          rest_after[id] = after.is_terminated() ? 0 : shortest_completion(after, 10);
        }
        for (size_t budget : {size_t{0}, size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
          m.fill_next_token_bitmask(budgeted, budget);
          std::vector<uint32_t> expected(words);
          bool any = false;
          for (int32_t id = 0; id < static_cast<int32_t>(vocab->size()); ++id) {
            if (!((plain[id / 32] >> (id % 32)) & 1)) continue;
            const int rest = rest_after[id];
            if (rest >= 0 && static_cast<size_t>(rest) <= budget) {
              expected[id / 32] |= 1u << (id % 32);
              any = true;
            }
          }
          if (!any) expected = plain;  // nothing fits: the plain mask
          EXPECT_EQ(budgeted, expected) << "budget " << budget << " step " << step;
        }
        std::vector<int32_t> allowed;
        for (int32_t id = 1; id < static_cast<int32_t>(vocab->size()); ++id) {
          if ((plain[id / 32] >> (id % 32)) & 1) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty());
        ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
      }
    }
  }
}

// Rules defined before the rules they use, and after: the shortest completion is the chain's
// length either way (counted here, not by a search).
TEST(CompletionBudget, LongChainsOfRulesInEitherOrder) {
  constexpr int kLinks = 3000;
  for (bool forward : {true, false}) {
    std::vector<std::string> rules;
    for (int i = 0; i < kLinks; ++i) {
      rules.push_back("r" + std::to_string(i) + " ::= \"x\"" +
                      (i + 1 < kLinks ? " r" + std::to_string(i + 1) : "") + " | \"yy\" r" +
                      std::to_string(std::min(i + 1, kLinks - 1)) + "\n");
    }
    if (!forward) std::reverse(rules.begin(), rules.end());
    std::string gbnf = "root ::= r0\n";
    for (const std::string& rule : rules) gbnf += rule;
    GrammarMatcher m(CompiledGrammar::compile(parse_gbnf(gbnf), small_vocabulary()));
    EXPECT_EQ(m.min_completion_bytes(), static_cast<size_t>(kLinks));
    ASSERT_TRUE(m.accept_bytes("xx"));
    EXPECT_EQ(m.min_completion_bytes(), static_cast<size_t>(kLinks - 2));
  }
}

}  // namespace
}  // namespace pagedserve::model::grammar
