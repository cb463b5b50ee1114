// Token mask time per decoding step for JSON grammars, cold, uncached and warm (see Cache), on
// the Llama 2 vocabulary (32,000 ids) and on a synthetic 150,000-id vocabulary: the union of the
// four GGUF test vocabularies (Llama 2 SPM, StarCoder, DeepSeek Coder, DeepSeek LLM; about 130k
// distinct byte strings) padded with random 2-6 character strings mixing ASCII, Latin-1, CJK and
// emoji. A step = fill_next_token_bitmask + accept_token along a fixed document, tokenized greedily
// (longest allowed token); `us_per_step` is the time per step.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "model/grammar/matcher_impl.h"
#include "model/loader/gguf.h"
#include "model/tokenizer/tokenizer.h"

namespace {

namespace g = pagedserve::model::grammar;
using pagedserve::model::Tokenizer;

std::filesystem::path tokenizers_dir() {
  if (const char* env = std::getenv("PAGEDSERVE_SHARED"))
    return std::filesystem::path(env) / "tokenizers";
  return std::filesystem::path(PAGEDSERVE_SHARED_DIR) / "tokenizers";
}

// A JSON schema's grammar as a schema converter writes it: fixed keys, typed values.
const char* const kSchemaGrammar = R"(
root ::= "{" ws "\"name\"" ws ":" ws string "," ws "\"age\"" ws ":" ws integer "," ws "\"email\"" ws ":" ws string "," ws "\"tags\"" ws ":" ws "[" ws (string ("," ws string)*)? ws "]" ws "}"
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ([0-9] | [1-9] [0-9]{0,15})
ws ::= " "?
)";

// Any JSON object (response_format json_object).
const char* const kJsonGrammar = R"(
root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

const std::string kDocument =
    "{\"name\": \"Alice Smith-Johnson\", \"age\": 42, \"email\": \"alice@example.com\", "
    "\"tags\": [\"admin\", \"caf\xC3\xA9 \xE2\x98\x95\", \"x\"]}";

std::vector<std::string> tokenizer_bytes(const Tokenizer& t, std::vector<int32_t>& end_ids) {
  std::vector<std::string> bytes(t.vocab_size());
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (t.is_special(id)) {
      end_ids.push_back(id);
    } else {
      bytes[id] = t.token_bytes_after_text(id);
    }
  }
  return bytes;
}

std::shared_ptr<const g::TokenVocabulary> llama2_vocabulary() {
  std::vector<int32_t> end_ids;
  auto bytes = tokenizer_bytes(Tokenizer::from_dir(tokenizers_dir() / "llama2"), end_ids);
  return std::make_shared<const g::TokenVocabulary>(std::move(bytes), std::move(end_ids));
}

std::shared_ptr<const g::TokenVocabulary> synthetic_150k_vocabulary() {
  std::vector<std::string> bytes{""};  // id 0: an end token
  std::unordered_set<std::string> seen{""};
  for (const char* name : {"llama-spm", "starcoder", "deepseek-coder", "deepseek-llm"}) {
    auto file = pagedserve::model::GgufFile::open(tokenizers_dir() / "gguf" /
                                                  ("ggml-vocab-" + std::string(name) + ".gguf"));
    std::vector<int32_t> unused;
    for (std::string& b : tokenizer_bytes(Tokenizer::from_gguf(*file), unused))
      if (seen.insert(b).second) bytes.push_back(std::move(b));
  }
  const std::vector<uint32_t> alphabet = {'a', 'e',  'n',  's',    't',    ' ',    '_',     '"',
                                          '1', 0xE9, 0xFC, 0x4E2D, 0x6587, 0x3042, 0x1F600, 0x2603};
  std::mt19937 rng(150);
  while (bytes.size() < 150'000) {
    std::string s;
    const int len = 2 + static_cast<int>(rng() % 5);
    for (int i = 0; i < len; ++i) g::detail::append_utf8(s, alphabet[rng() % alphabet.size()]);
    if (seen.insert(s).second) bytes.push_back(std::move(s));
  }
  return std::make_shared<const g::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{0});
}

// The document as tokens: at each step the longest vocabulary entry the grammar allows.
std::vector<int32_t> greedy_tokens(const g::CompiledGrammar& compiled, const std::string& text) {
  const g::TokenVocabulary& vocab = compiled.vocabulary();
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id)
    if (!vocab.bytes(id).empty()) ids.emplace(vocab.bytes(id), id);
  std::vector<int32_t> out;
  g::GrammarMatcher m(std::shared_ptr<const g::CompiledGrammar>(&compiled, [](auto*) {}));
  for (size_t pos = 0; pos < text.size();) {
    for (size_t len = std::min<size_t>(24, text.size() - pos); len > 0; --len) {
      auto it = ids.find(text.substr(pos, len));
      if (it != ids.end() && g::GrammarMatcher(m).accept_token(it->second)) {
        m.accept_token(it->second);
        out.push_back(it->second);
        pos += len;
        break;
      }
      if (len == 1) std::abort();  // the vocabulary lacks a byte
    }
  }
  return out;
}

// cold: neither the masks nor the grammar's DFA known (the first request of a grammar, before
// any prewarm); uncached: the masks cleared but the DFA that earlier walks built kept (a state
// first met after others); warm: every mask cached.
enum class Cache { kCold, kUncached, kWarm };

void BM_Mask(benchmark::State& state, const char* grammar_text, bool big_vocab, Cache cache) {
  static const auto llama2 = llama2_vocabulary();
  static const auto big = synthetic_150k_vocabulary();
  const auto vocab = big_vocab ? big : llama2;
  const auto compiled = g::CompiledGrammar::compile(g::parse_gbnf(grammar_text), vocab);
  const std::vector<int32_t> tokens = greedy_tokens(*compiled, kDocument);
  std::vector<uint32_t> mask(g::bitmask_words(vocab->size()));
  const auto walk = [&] {
    g::GrammarMatcher m(compiled);
    for (int32_t id : tokens) {
      if (cache != Cache::kWarm) compiled->impl().cache.clear();
      if (cache == Cache::kCold) compiled->impl().dfas.clear();
      m.fill_next_token_bitmask(mask);
      benchmark::DoNotOptimize(mask.data());
      m.accept_token(id);
    }
  };
  walk();  // the warm and uncached runs start with what one decode of the document leaves
  for (auto _ : state) walk();
  state.counters["steps"] = static_cast<double>(tokens.size());
  state.counters["us_per_step"] = benchmark::Counter(
      static_cast<double>(tokens.size()) * 1e-6,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["vocab"] = static_cast<double>(vocab->size());
}

#define PS_MASK_BENCH(name, grammar, big)                                     \
  BENCHMARK_CAPTURE(BM_Mask, name##_cold, grammar, big, Cache::kCold)         \
      ->Unit(benchmark::kMillisecond);                                        \
  BENCHMARK_CAPTURE(BM_Mask, name##_uncached, grammar, big, Cache::kUncached) \
      ->Unit(benchmark::kMillisecond);                                        \
  BENCHMARK_CAPTURE(BM_Mask, name##_warm, grammar, big, Cache::kWarm)->Unit(benchmark::kMillisecond)
PS_MASK_BENCH(schema_llama2, kSchemaGrammar, false);
PS_MASK_BENCH(schema_150k, kSchemaGrammar, true);
PS_MASK_BENCH(json_llama2, kJsonGrammar, false);
PS_MASK_BENCH(json_150k, kJsonGrammar, true);

// CompiledGrammar::prewarm: the time to cache every state reachable from the start (or as
// many as its limits allow), then how many of the document's steps still miss the cache.
void BM_Prewarm(benchmark::State& state, const char* grammar_text, bool big_vocab) {
  static const auto llama2 = llama2_vocabulary();
  static const auto big = synthetic_150k_vocabulary();
  const auto vocab = big_vocab ? big : llama2;
  const auto grammar = g::parse_gbnf(grammar_text);
  std::shared_ptr<const g::CompiledGrammar> compiled;
  g::PrewarmStats stats;
  for (auto _ : state) {
    state.PauseTiming();
    compiled = g::CompiledGrammar::compile(grammar, vocab);
    state.ResumeTiming();
    stats = compiled->prewarm();
  }
  const std::vector<int32_t> tokens = greedy_tokens(*compiled, kDocument);
  std::vector<uint32_t> mask(g::bitmask_words(vocab->size()));
  g::GrammarMatcher m(compiled);
  const size_t cached = compiled->cached_masks();
  for (int32_t id : tokens) {
    m.fill_next_token_bitmask(mask);
    m.accept_token(id);
  }
  state.counters["states"] = static_cast<double>(stats.states);
  state.counters["complete"] = stats.complete ? 1 : 0;
  state.counters["us_per_state"] = 1e6 * stats.seconds / std::max<double>(1, stats.states);
  state.counters["steps"] = static_cast<double>(tokens.size());
  state.counters["step_misses"] = static_cast<double>(compiled->cached_masks() - cached);
}
BENCHMARK_CAPTURE(BM_Prewarm, schema_llama2, kSchemaGrammar, false)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_Prewarm, schema_150k, kSchemaGrammar, true)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK_CAPTURE(BM_Prewarm, json_llama2, kJsonGrammar, false)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK_CAPTURE(BM_Prewarm, json_150k, kJsonGrammar, true)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// The costliest cold mask: inside a JSON string nearly every token is allowed, so the walk
// visits nearly the whole vocabulary.
void BM_StringStateCold(benchmark::State& state, bool big_vocab) {
  static const auto llama2 = llama2_vocabulary();
  static const auto big = synthetic_150k_vocabulary();
  const auto vocab = big_vocab ? big : llama2;
  const auto compiled = g::CompiledGrammar::compile(g::parse_gbnf(kSchemaGrammar), vocab);
  g::GrammarMatcher m(compiled);
  if (!m.accept_bytes("{\"name\": \"Al")) std::abort();
  std::vector<uint32_t> mask(g::bitmask_words(vocab->size()));
  for (auto _ : state) {
    compiled->impl().cache.clear();
    compiled->impl().dfas.clear();
    m.fill_next_token_bitmask(mask);
    benchmark::DoNotOptimize(mask.data());
  }
}
BENCHMARK_CAPTURE(BM_StringStateCold, llama2, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_StringStateCold, synthetic_150k, true)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
