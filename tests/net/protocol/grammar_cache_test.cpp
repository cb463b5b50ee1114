// GrammarCache: one compiled grammar per text, and the background prewarm that caches the masks
// of the states a decode of it can reach before the decode asks for them.
#include "net/protocol/grammar_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using testing::smollm_tokenizer;

// A schema's grammar: finite (every reachable state can be cached).
const char* const kPersonGrammar = R"(
root ::= "{" ws "\"name\"" ws ":" ws string "," ws "\"age\"" ws ":" ws [0-9]{1,3} ws "}"
string ::= "\"" [a-zA-Z ]* "\""
ws ::= " "?
)";

// Nested lists: no end of states.
const char* const kNestedGrammar = R"(
root ::= list
list ::= "[" (item ("," item)*)? "]"
item ::= list | [0-9]+
)";

std::vector<int32_t> eos_of(const model::Tokenizer& tokenizer) {
  return {*tokenizer.eos_token_id()};
}

TEST(GrammarCache, OneCompiledGrammarPerText) {
  GrammarCache cache(smollm_tokenizer(), eos_of(smollm_tokenizer()));
  auto a = cache.get(kPersonGrammar);
  EXPECT_EQ(cache.get(kPersonGrammar), a);
  EXPECT_NE(cache.get(kNestedGrammar), a);
  EXPECT_THROW(cache.get("root ::= ("), model::grammar::GrammarError);
}

TEST(GrammarCache, PrewarmsEachNewGrammarInTheBackground) {
  GrammarCache cache(smollm_tokenizer(), eos_of(smollm_tokenizer()));
  auto compiled = cache.get(kPersonGrammar);
  cache.wait_for_prewarm();
  const model::grammar::PrewarmStats stats = compiled->prewarm();  // the background run's
  EXPECT_TRUE(stats.complete);
  EXPECT_GT(stats.states, 10u);
  EXPECT_EQ(compiled->cached_masks(), stats.states);
  // A decode of a document finds every mask cached: no state is added.
  model::grammar::GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(model::grammar::bitmask_words(compiled->vocabulary().size()));
  const std::string document = "{\"name\": \"Ada Lovelace\", \"age\": 36}";
  const model::Tokenizer& tokenizer = smollm_tokenizer();
  for (int32_t id : tokenizer.encode(document, /*add_special_tokens=*/false)) {
    m.fill_next_token_bitmask(mask);
    ASSERT_TRUE(mask[id >> 5] >> (id & 31) & 1) << id;
    ASSERT_TRUE(m.accept_token(id)) << id;
  }
  EXPECT_TRUE(m.can_end());
  EXPECT_EQ(compiled->cached_masks(), stats.states);
}

TEST(GrammarCache, PrewarmOffLeavesMasksToTheDecode) {
  model::grammar::PrewarmLimits off;
  off.max_states = 0;
  GrammarCache cache(smollm_tokenizer(), eos_of(smollm_tokenizer()), off);
  auto compiled = cache.get(kPersonGrammar);
  cache.wait_for_prewarm();
  EXPECT_EQ(compiled->cached_masks(), 0u);
}

TEST(GrammarCache, StopsAPrewarmUnderWayWhenDestroyed) {
  model::grammar::PrewarmLimits long_search;
  long_search.max_states = 1'000'000;
  long_search.max_seconds = 600.0;
  std::shared_ptr<const model::grammar::CompiledGrammar> compiled;
  {
    GrammarCache cache(smollm_tokenizer(), eos_of(smollm_tokenizer()), long_search);
    compiled = cache.get(kNestedGrammar);
  }  // the destructor stops the search (within one state's walk) and joins its thread
  // Whatever was cached is correct: a mask of the start allows exactly "[" tokens.
  model::grammar::GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(model::grammar::bitmask_words(compiled->vocabulary().size()));
  m.fill_next_token_bitmask(mask);
  for (int32_t id = 0; id < static_cast<int32_t>(compiled->vocabulary().size()); ++id) {
    const std::string& bytes = compiled->vocabulary().bytes(id);
    model::grammar::GrammarMatcher copy = m;
    EXPECT_EQ(static_cast<bool>(mask[id >> 5] >> (id & 31) & 1), copy.accept_token(id))
        << "id " << id << " '" << bytes << "'";
  }
}

// exit() while a prewarm is under way: the process's statics are destroyed while the prewarm
// thread still runs (nothing joins it), so what it reads must not be one of them. A JSON string
// grammar's prewarm reads the table of string-content characters (token_mask.cpp) for each new
// state; that table was a function-local static constructed after the served model's, so
// destroyed first, and ASan saw the prewarm read it freed (the api_body fuzz harness, at its
// exit). Under ASan a read of freed memory aborts the child: the exit code is then not 0.
TEST(GrammarCacheDeathTest, ExitDuringAPrewarmReadsNothingFreed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        model::grammar::PrewarmLimits long_search;
        long_search.max_states = 1'000'000;
        long_search.max_seconds = 600.0;
        // Never destroyed, as a served model held in a static is not destroyed before exit's
        // other statics: the prewarm is still running when they go.
        auto* cache = new GrammarCache(smollm_tokenizer(), eos_of(smollm_tokenizer()), long_search);
        cache->get(R"(
root ::= value
value ::= "[" (value ("," value)*)? "]" | "\"" [^"\\]* "\""
)");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace pagedserve::net
