// Speculative decoding of grammar-constrained requests (structured outputs): each verified
// position is drawn under the grammar's mask after the draws before it, so outputs are the
// same tokens as without speculation (n-gram and greedy draft proposals), the grammar's end
// stops a row mid-step, and every output is a sentence of the grammar.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "actors/llm_engine.h"
#include "tests/actors/grammar_engine_util.h"
#include "tests/actors/speculative_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

using namespace spec_testing;

EngineConfig speculating(EngineConfig config, SpeculativeMethod method) {
  config.speculative.method = method;
  config.speculative.num_speculative_tokens = 4;
  config.speculative.max_batch_seqs = 0;
  if (method == SpeculativeMethod::kDraft) {
    config.speculative.draft_model =
        (pagedserve::testing::shared_dir() / "models" / "stories260K.gguf").string();
  }
  return config;
}

// A literal phrase repeated: once the first repetition is out, prompt lookup proposes the rest.
const char* const kPattern = "(the cat sat on the mat\\. ){2,5}";

TEST(SpeculativeGrammar, ConstrainedOutputsAreIdenticalAndMatchTheGrammar) {
  const EngineConfig plain = testing_util::stories_config();
  LlmEngine tokenizing(plain);
  const auto grammar =
      testing_util::compile_grammar(tokenizing, model::grammar::regex_to_gbnf(kPattern));
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    model::SamplingParams params = greedy(120);
    if (i >= 3) {  // seeded sampling: point-mass verification draws what a lone step would
      params.temperature = 1.0f;
      params.seed = 300 + i;
    }
    params.grammar = grammar;
    requests.push_back({tokenizing.tokenizer().encode(kPrompts[i]), params});
  }
  const EngineRun baseline = run(plain, requests);
  const std::regex reference(kPattern);
  for (const testing_util::Finished& f : baseline.outputs) {
    ASSERT_EQ(f.last.outputs.size(), 1u);
    EXPECT_TRUE(std::regex_match(f.last.outputs[0].text, reference)) << f.last.outputs[0].text;
    EXPECT_EQ(f.last.outputs[0].finish_reason, FinishReason::kStop);
  }
  const EngineRun ngram = run(speculating(plain, SpeculativeMethod::kNgram), requests);
  expect_same_outputs(baseline, ngram, "n-gram");
  EXPECT_GT(ngram.stats.num_spec_accepted_tokens, 30) << "the phrase repeats";
  // The greedy ones with the draft (sampled ones follow the rejection rule: other tokens).
  const std::vector<Request> greedy_ones(requests.begin(), requests.begin() + 3);
  const EngineRun draft = run(speculating(plain, SpeculativeMethod::kDraft), greedy_ones);
  expect_same_outputs(EngineRun{{baseline.outputs.begin(), baseline.outputs.begin() + 3}, {}},
                      draft, "draft");
  EXPECT_GT(draft.stats.num_spec_rows, 0);
  const EngineRun sampled = run(speculating(plain, SpeculativeMethod::kDraft), requests);
  for (const testing_util::Finished& f : sampled.outputs) {
    EXPECT_TRUE(std::regex_match(f.last.outputs[0].text, reference)) << f.last.outputs[0].text;
  }
}

}  // namespace
}  // namespace pagedserve::actors
