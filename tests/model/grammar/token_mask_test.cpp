// Token masks against brute force on real vocabularies (Llama 2, SmolLM2): in random reachable
// states of several grammars, the mask must equal, id by id, whether a copy of the matcher
// accepts the token (end tokens: can_end()). Also: cache hits give the same mask, masks from
// several threads agree, termination allows nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "model/grammar/matcher_impl.h"
#include "model/grammar/pushdown.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/model/grammar/grammar_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::model::grammar {
namespace {

std::shared_ptr<const TokenVocabulary> load_vocabulary(const std::string& name) {
  const Tokenizer tok =
      Tokenizer::from_dir(pagedserve::testing::shared_dir() / "tokenizers" / name);
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<int32_t> end_ids;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id)) {
      end_ids.push_back(id);  // every special id ends here (the tests need only some)
    } else {
      bytes[id] = tok.token_bytes_after_text(id);
    }
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(end_ids));
}

const char* const kJsonGrammar = R"(
root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

std::vector<uint32_t> brute_force(const GrammarMatcher& m, const TokenVocabulary& vocab) {
  std::vector<uint32_t> mask(bitmask_words(vocab.size()), 0);
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
    GrammarMatcher copy = m;
    if (copy.accept_token(id)) mask[id >> 5] |= uint32_t{1} << (id & 31);
  }
  return mask;
}

std::vector<int32_t> ids_of(const std::vector<uint32_t>& mask) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < mask.size() * 32; ++i)
    if (mask[i >> 5] >> (i & 31) & 1) ids.push_back(static_cast<int32_t>(i));
  return ids;
}

// Walks `steps` random allowed tokens from the start, comparing the mask at every state with
// brute force. With `all_cached` (after a prewarm), no state the walks meet may be missing from
// the cache: none is added.
void check_random_walks(const std::shared_ptr<const CompiledGrammar>& compiled, int walks,
                        int steps, uint32_t seed, bool all_cached = false) {
#ifndef NDEBUG
  // Sanitizer (Debug) builds look for memory errors, not coverage: a shorter walk there; the
  // brute force costs a matcher copy per token and state.
  walks = 1;
  steps = std::min(steps, 4);
#endif
  const TokenVocabulary& vocab = compiled->vocabulary();
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(bitmask_words(vocab.size()));
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(compiled);
    for (int s = 0; s < steps && !m.is_terminated(); ++s) {
      const size_t cached = compiled->cached_masks();
      m.fill_next_token_bitmask(mask);
      if (all_cached) EXPECT_EQ(compiled->cached_masks(), cached) << "walk " << w << " step " << s;
      const std::vector<int32_t> allowed = ids_of(brute_force(m, vocab));
      ASSERT_EQ(ids_of(mask), allowed) << "walk " << w << " step " << s;
      if (allowed.empty()) break;
      // Prefer ending late: skip end tokens most of the time.
      int32_t id = allowed[rng() % allowed.size()];
      for (int tries = 0; tries < 5 && vocab.is_end_token(id); ++tries)
        id = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(id));
    }
  }
}

void check_random_walks(const std::string& gbnf, std::shared_ptr<const TokenVocabulary> vocab,
                        int walks, int steps, uint32_t seed) {
  check_random_walks(CompiledGrammar::compile(parse_gbnf(gbnf), std::move(vocab)), walks, steps,
                     seed);
}

class TokenMask : public ::testing::TestWithParam<std::string> {
 protected:
  static std::shared_ptr<const TokenVocabulary> vocab(const std::string& name) {
    static std::map<std::string, std::shared_ptr<const TokenVocabulary>> cache;
    auto& v = cache[name];
    if (!v) v = load_vocabulary(name);
    return v;
  }
};

TEST_P(TokenMask, JsonAgreesWithBruteForce) {
  check_random_walks(kJsonGrammar, vocab(GetParam()), 3, 12, 1);
}

TEST_P(TokenMask, RegexChoiceAndUnicodeAgreeWithBruteForce) {
  check_random_walks(regex_to_gbnf("[A-Z][a-z]{1,8}( [A-Z][a-z]+)*\\."), vocab(GetParam()), 2, 8,
                     2);
  const std::vector<std::string> choices{"positive", "negative", "neutral", "n/a"};
  check_random_walks(choice_to_gbnf(choices), vocab(GetParam()), 3, 6, 3);
  check_random_walks("root ::= [^a-z\"]{0,12} \"\\\"\"", vocab(GetParam()), 2, 8, 4);
  check_random_walks(R"g(root ::= "(" root ")" root | "")g", vocab(GetParam()), 2, 10, 5);
}

TEST_P(TokenMask, CacheHitsAndSharedCache) {
  auto compiled = CompiledGrammar::compile(parse_gbnf(kJsonGrammar), vocab(GetParam()));
  GrammarMatcher a(compiled);
  ASSERT_TRUE(a.accept_bytes("{\"key\": \"va"));
  std::vector<uint32_t> cold(bitmask_words(vocab(GetParam())->size()), 0xFFFFFFFF);
  std::vector<uint32_t> warm(cold.size(), 0xFFFFFFFF), other(cold.size(), 0xFFFFFFFF);
  compiled->impl().cache.clear();
  a.fill_next_token_bitmask(cold);
  EXPECT_EQ(compiled->impl().cache.size(), 1u);
  a.fill_next_token_bitmask(warm);
  EXPECT_EQ(warm, cold);
  // Another matcher reaching the same state by other bytes shares the entry.
  GrammarMatcher b(compiled);
  ASSERT_TRUE(b.accept_bytes("{\"key\": \"v"));
  ASSERT_TRUE(b.accept_bytes("a"));
  b.fill_next_token_bitmask(other);
  EXPECT_EQ(other, cold);
  EXPECT_EQ(compiled->impl().cache.size(), 1u);
  EXPECT_EQ(ids_of(cold), ids_of(brute_force(a, *vocab(GetParam()))));
}

TEST_P(TokenMask, ThreadsAgree) {
  auto compiled = CompiledGrammar::compile(parse_gbnf(kJsonGrammar), vocab(GetParam()));
  const std::vector<std::string> prefixes{
      "{", "{\"a\": [1, ", "{\"a\": tr", "{\"b\": {\"c\": \"x", "{\"d\": -1.5e", "{\"e\": null}"};
  std::vector<std::vector<uint32_t>> serial, parallel(prefixes.size());
  for (const std::string& p : prefixes) {
    GrammarMatcher m(compiled);
    ASSERT_TRUE(m.accept_bytes(p)) << p;
    serial.push_back(brute_force(m, *vocab(GetParam())));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < prefixes.size(); i += 2) {
        GrammarMatcher m(compiled);
        m.accept_bytes(prefixes[i]);
        parallel[i].assign(serial[i].size(), 0);
        m.fill_next_token_bitmask(parallel[i]);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prefixes.size(); ++i)
    EXPECT_EQ(ids_of(parallel[i]), ids_of(serial[i])) << prefixes[i];
}

TEST_P(TokenMask, EndTokensAndTermination) {
  auto v = vocab(GetParam());
  auto compiled = CompiledGrammar::compile(parse_gbnf(R"(root ::= "ok")"), v);
  GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(bitmask_words(v->size()));
  const Tokenizer tok =
      Tokenizer::from_dir(pagedserve::testing::shared_dir() / "tokenizers" / GetParam());
  const int32_t eos = *tok.eos_token_id();
  EXPECT_FALSE(m.accept_token(eos));
  ASSERT_TRUE(m.accept_bytes("ok"));
  EXPECT_TRUE(m.must_end());
  m.fill_next_token_bitmask(mask);
  EXPECT_EQ(ids_of(mask), ids_of(brute_force(m, *v)));
  EXPECT_TRUE(mask[eos >> 5] >> (eos & 31) & 1);
  ASSERT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_EQ(m.num_tokens_accepted(), 1u);
  m.fill_next_token_bitmask(mask);
  EXPECT_EQ(ids_of(mask), std::vector<int32_t>{});
  EXPECT_FALSE(m.accept_token(eos));
}

// A schema's grammar as the converter writes it: finite, but with free strings (escapes,
// multi-byte characters) and a bounded repetition.
const char* const kSchemaGrammar = R"(
root ::= "{" ws "\"name\"" ws ":" ws string "," ws "\"age\"" ws ":" ws integer "," ws "\"tags\"" ws ":" ws "[" ws (string ("," ws string)*)? ws "]" ws "}"
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ([0-9] | [1-9] [0-9]{0,15})
ws ::= " "?
)";

// The state after `bytes` from the start, as a matcher computes it.
detail::StackSet stacks_after(const CompiledGrammar& compiled, std::string_view bytes) {
  detail::PushdownArena arena(compiled.grammar());
  arena.set_interning(true);
  std::vector<uint32_t> heads;
  arena.load(compiled.impl().start, heads);
  size_t begin = 0;
  for (char c : bytes) {
    const size_t end = heads.size();
    arena.advance(heads, begin, end, static_cast<uint8_t>(c));
    begin = end;
  }
  return arena.extract(heads, begin, heads.size());
}

TEST_P(TokenMask, PrewarmCachesEveryReachableStateOfAFiniteGrammar) {
  auto compiled = CompiledGrammar::compile(parse_gbnf(kSchemaGrammar), vocab(GetParam()));
  const PrewarmStats stats = compiled->prewarm();
  EXPECT_TRUE(stats.complete);
  EXPECT_GT(stats.states, 20u);
  EXPECT_EQ(compiled->cached_masks(), stats.states);
  check_random_walks(compiled, 3, 24, 7, /*all_cached=*/true);
  // The cached masks and completion costs (the budget's tail relies on them) are those a fresh
  // walk finds, in states reached by tokens ending mid-string, mid-escape and mid-number.
  std::vector<uint32_t> cached(bitmask_words(vocab(GetParam())->size()));
  std::vector<uint32_t> fresh(cached.size());
  for (const char* prefix :
       {"", "{\"name\": \"Jo", "{ \"name\":\"\\u00", "{\"name\": \"\", \"age\": -1"}) {
    const detail::StackSet stacks = stacks_after(*compiled, prefix);
    uint32_t cached_cost = 0, fresh_cost = 0;
    ASSERT_TRUE(compiled->impl().cache.lookup(detail::state_key(stacks), cached, &cached_cost))
        << prefix;
    std::fill(fresh.begin(), fresh.end(), 0u);
    compiled->impl().dfas.clear();  // a walk from no DFA at all, not the prewarm's
    detail::compute_mask(compiled->impl(), stacks, fresh, detail::kNoBudget, &fresh_cost);
    EXPECT_EQ(cached, fresh) << prefix;
    EXPECT_EQ(cached_cost, fresh_cost) << prefix;
  }
}

// Inside a string that holds any character, the walk takes the content tokens (most of the
// vocabulary) as one bitmask and walks only the rest; inside strings that count or restrict
// their characters it walks everything. Either way the mask is brute force's, id by id.
TEST_P(TokenMask, InsideAnyStringContentTokensAreTakenAtOnce) {
  struct Case {
    const char* gbnf;
    const char* prefix;
    bool at_once;
  };
  const Case cases[] = {
      {kJsonGrammar, "{\"", true},
      {kJsonGrammar, "{\"key\": [\"ab\\n\u00e9", true},
      {kJsonGrammar, "{\"key\": [\"ab\\u00", false},  // mid-escape: hex digits only
      {kJsonGrammar, "{\"key\": ", false},
      {R"(root ::= "\"" [^"\\]{0,5} "\"")", "\"ab", false},  // counts its characters
      {R"(root ::= "\"" [^"\\x]* "\"")", "\"ab", false},     // no 'x'
      {R"(root ::= "\"" [^"\\]* "\"" [0-9])", "\"ab", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.gbnf) + " after " + c.prefix);
    auto compiled = CompiledGrammar::compile(parse_gbnf(c.gbnf), vocab(GetParam()));
    GrammarMatcher m(compiled);
    ASSERT_TRUE(m.accept_bytes(c.prefix));
    EXPECT_EQ(detail::takes_content_as_bitmask(compiled->impl(), stacks_after(*compiled, c.prefix)),
              c.at_once);
    std::vector<uint32_t> mask(bitmask_words(vocab(GetParam())->size()));
    m.fill_next_token_bitmask(mask);
    const std::vector<int32_t> allowed = ids_of(mask);
    EXPECT_EQ(allowed, ids_of(brute_force(m, *vocab(GetParam()))));
    if (c.at_once) EXPECT_GT(allowed.size(), vocab(GetParam())->size() / 2);
  }
}

// Two bytes share a class exactly when every byte set holds both or neither and every UTF-8
// class steps them alike from each of its states (checked pair by pair here).
TEST(ByteClasses, GroupExactlyTheBytesNoTerminalTellsApart) {
  for (const std::string& gbnf :
       {std::string(kJsonGrammar), regex_to_gbnf("[A-Z][a-z]{1,8}( [A-Z][a-z]+)*\\."),
        std::string(R"(root ::= [^"\\x]* "é" [\u0100-\u2000]+ [0-9a-f])")}) {
    SCOPED_TRACE(gbnf);
    const auto g = parse_gbnf(gbnf);
    const auto alike = [&](int a, int b) {
      for (const detail::ByteSet& set : g->byte_sets)
        if (set.test(a) != set.test(b)) return false;
      for (const detail::Utf8Class& c : g->classes)
        for (const auto& next : c.next)
          if (next[a] != next[b]) return false;
      return true;
    };
    std::set<int> ids;
    for (int a = 0; a < 256; ++a) {
      ids.insert(g->byte_class[a]);
      for (int b = a + 1; b < 256; ++b) {
        ASSERT_EQ(g->byte_class[a] == g->byte_class[b], alike(a, b)) << a << " " << b;
      }
    }
    EXPECT_LT(ids.size(), 200u);  // far fewer classes than bytes: the point of them
  }
}

// Content tokens by their bytes, against a UTF-8 reading written here: whole characters only,
// each a scalar value (no surrogate, no overlong form, at most U+10FFFF) that a JSON string
// holds unescaped.
TEST(StringContent, ClassifiesTokensAsAUtf8DecoderDoes) {
  const auto reference = [](std::string_view s) {
    if (s.empty()) return false;
    for (size_t i = 0; i < s.size();) {
      const auto b = static_cast<uint8_t>(s[i]);
      const int length = b < 0x80 ? 1 : b >> 5 == 6 ? 2 : b >> 4 == 14 ? 3 : b >> 3 == 30 ? 4 : 0;
      if (length == 0 || i + length > s.size()) return false;
      uint32_t cp = length == 1 ? b : b & (0x7f >> length);
      for (int k = 1; k < length; ++k) {
        const auto c = static_cast<uint8_t>(s[i + k]);
        if (c >> 6 != 2) return false;
        cp = cp << 6 | (c & 0x3f);
      }
      const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < smallest[length] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
      if (cp < 0x20 || cp == 0x7f || cp == '"' || cp == '\\') return false;
      i += length;
    }
    return true;
  };
  std::mt19937 rng(5);
  const std::string interesting =
      "a \"\\\x1f\x7f\xc2\xc1\xe0\xed\xf0\xf4\xf5\x80\x9f\xa0\xbf\x8f\x90";
  for (int i = 0; i < 200000; ++i) {
    std::string s(1 + rng() % 5, ' ');
    for (char& ch : s)
      ch = rng() % 2 ? interesting[rng() % interesting.size()] : static_cast<char>(rng());
    ASSERT_EQ(detail::is_string_content(s), reference(s)) << ::testing::PrintToString(s);
  }
  for (const char* good :
       {"a", "\xc2\x80", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf", " ok"})
    EXPECT_TRUE(detail::is_string_content(good)) << good;
  for (const char* bad :
       {"", "\"", "\\", "\x7f", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "\xe2\x82"})
    EXPECT_FALSE(detail::is_string_content(bad)) << bad;
}

TEST_P(TokenMask, PrewarmStopsAtItsLimitsOnARecursiveGrammar) {
  auto compiled = CompiledGrammar::compile(parse_gbnf(kJsonGrammar), vocab(GetParam()));
  PrewarmLimits limits;
  limits.max_states = 40;
  const PrewarmStats stats = compiled->prewarm(limits);
  EXPECT_FALSE(stats.complete);  // nesting has no end
  EXPECT_EQ(stats.states, 40u);
  EXPECT_EQ(compiled->cached_masks(), 40u);
  // Once per compiled grammar: a second call returns the first's result and adds nothing.
  limits.max_states = 80;
  EXPECT_EQ(compiled->prewarm(limits).states, 40u);
  EXPECT_EQ(compiled->cached_masks(), 40u);
  check_random_walks(compiled, 2, 12, 8);  // states past the limit: computed on use
}

TEST_P(TokenMask, PrewarmHonoursItsStopFlag) {
  auto compiled = CompiledGrammar::compile(parse_gbnf(kSchemaGrammar), vocab(GetParam()));
  std::atomic<bool> stop{true};
  PrewarmLimits limits;
  limits.stop = &stop;
  const PrewarmStats stats = compiled->prewarm(limits);
  EXPECT_EQ(stats.states, 0u);
  EXPECT_FALSE(stats.complete);
  EXPECT_EQ(compiled->cached_masks(), 0u);
}

// The arena clears its sets once per byte: after a peak they must not keep its buckets (each
// clear() walks them all; the brute-force tests ran 20x slower after an ambiguous grammar).
TEST(ClearHash, LetsGoOfAnEarlierPeakButKeepsASteadySize) {
  std::unordered_set<uint64_t> set;
  for (uint64_t i = 0; i < 100000; ++i) set.insert(i);
  detail::clear_hash(set);  // was full: cleared, buckets kept for the next such step
  EXPECT_TRUE(set.empty());
  EXPECT_GT(set.bucket_count(), 50000u);
  set.insert(1);
  detail::clear_hash(set);  // a small step after the peak: the buckets go
  EXPECT_TRUE(set.empty());
  EXPECT_LE(set.bucket_count(), 1024u);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenMask,
                         ::testing::Values("llama2", "smollm2-135m-instruct"),
                         [](const auto& info) {
                           return info.param == "llama2" ? "Llama2" : "SmolLM2";
                         });

}  // namespace
}  // namespace pagedserve::model::grammar
