// Structured outputs through the engine with stories260K, a model that knows nothing of JSON:
// every output must match its grammar, checked by references independent of the matcher
// (std::regex, nlohmann's JSON parser), whatever batching, forking (n > 1), preemption
// (recompute and swap) and overlap scheduling do to the sequences.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "tests/actors/engine_test_util.h"
#include "tests/actors/grammar_engine_util.h"

namespace pagedserve::actors {
namespace {

using namespace testing_util;
namespace grammar = model::grammar;

std::shared_ptr<const grammar::CompiledGrammar> compile(const LlmEngine& engine,
                                                        const std::string& gbnf) {
  return compile_grammar(engine, gbnf);
}

model::SamplingParams sampled(std::shared_ptr<const grammar::CompiledGrammar> g, uint64_t seed,
                              int max_tokens = 200) {
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.grammar = std::move(g);
  return p;
}

const char* const kPrompts[] = {"Once upon a time", "Lily and Ben", "The dog", "One day"};

// The texts of every sequence of every request (n per request).
std::vector<std::string> texts_of(const std::map<uint64_t, Finished>& done) {
  std::vector<std::string> out;
  for (const auto& [id, f] : done) {
    EXPECT_TRUE(f.finished);
    for (const CompletionOutput& seq : f.last.outputs) {
      EXPECT_EQ(seq.finish_reason, FinishReason::kStop) << seq.text;
      out.push_back(seq.text);
    }
  }
  return out;
}

TEST(StructuredOutputEngine, RegexOutputsMatchStdRegex) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    LlmEngine engine(stories_config(), overlap);
    // Bounded: a model that knows nothing of the pattern rarely ends an unbounded one.
    const std::string pattern = "[0-9]{3}-[a-z]{2,6}( [A-Z][a-z]{1,8})?";
    auto g = compile(engine, grammar::regex_to_gbnf(pattern));
    for (uint64_t seed = 0; seed < 12; ++seed) {
      model::SamplingParams p = sampled(g, seed);
      p.n = 3;
      engine.add_request(engine.tokenizer().encode(kPrompts[seed % 4]), p);
    }
    const std::vector<std::string> texts = texts_of(run_to_completion(engine));
    ASSERT_EQ(texts.size(), 36u);
    const std::regex reference(pattern);
    for (const std::string& text : texts) EXPECT_TRUE(std::regex_match(text, reference)) << text;
    expect_all_blocks_free(engine);
  }
}

// A schema's outputs parse as JSON and hold what the schema demands (checked by hand here).
void expect_valid_person(const std::string& text) {
  const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(value.is_discarded()) << "not JSON: " << text;
  ASSERT_TRUE(value.is_object()) << text;
  ASSERT_TRUE(value.contains("name") && value["name"].is_string()) << text;
  ASSERT_TRUE(value.contains("age") && value["age"].is_number_integer()) << text;
  EXPECT_GE(value["age"].get<int>(), 0) << text;
  EXPECT_LE(value["age"].get<int>(), 120) << text;
  ASSERT_TRUE(value.contains("pets") && value["pets"].is_array()) << text;
  EXPECT_LE(value["pets"].size(), 2u) << text;
  for (const auto& pet : value["pets"]) {
    EXPECT_TRUE(pet == "cat" || pet == "dog") << text;
  }
  EXPECT_LE(value.size(), 3u) << text;
}

const char* const kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}
  },
  "required": ["name", "age", "pets"]
})";

TEST(StructuredOutputEngine, JsonSchemaOutputsSurvivePreemption) {
  for (auto mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    SCOPED_TRACE(preemption_mode_name(mode));
    EngineConfig config = stories_config();
    config.enable_prefix_caching = false;
    config.num_kv_blocks = 14;  // 16 sequences of up to ~100 tokens: preemption is certain
    config.max_model_len = 192;
    config.preemption_mode = mode;
    if (mode == PreemptionMode::kSwap) config.swap_space_bytes = int64_t{8} << 20;
    LlmEngine engine(config);
    auto g =
        compile(engine, grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(kPersonSchema)));
    for (uint64_t seed = 0; seed < 8; ++seed) {
      model::SamplingParams p = sampled(g, 100 + seed, 150);
      p.n = 2;
      engine.add_request(engine.tokenizer().encode(kPrompts[seed % 4]), p);
    }
    const std::vector<std::string> texts = texts_of(run_to_completion(engine));
    ASSERT_EQ(texts.size(), 16u);
    for (const std::string& text : texts) expect_valid_person(text);
    const SchedulerStats stats = engine.stats();
    EXPECT_GT(stats.num_preemptions_swap + stats.num_preemptions_recompute, 0);
    expect_all_blocks_free(engine);
  }
}

TEST(StructuredOutputEngine, GreedyChoiceIgnoresEosAndMinTokensOnceComplete) {
  LlmEngine engine(stories_config());
  auto g = compile(engine, grammar::choice_to_gbnf(std::vector<std::string>{"yes", "no"}));
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 50;
  p.min_tokens = 10;  // the grammar ends first: it wins
  p.ignore_eos = true;
  p.grammar = g;
  const uint64_t id = engine.add_request(engine.tokenizer().encode("Once upon a time"), p);
  auto done = run_to_completion(engine);
  const CompletionOutput& seq = done[id].last.outputs.at(0);
  EXPECT_TRUE(seq.text == "yes" || seq.text == "no") << seq.text;
  EXPECT_EQ(seq.finish_reason, FinishReason::kStop);
  expect_all_blocks_free(engine);
}

}  // namespace
}  // namespace pagedserve::actors
