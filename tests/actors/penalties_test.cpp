// Penalties reach the sampler: greedy decoding with presence, frequency and repetition
// penalties equals a greedy loop the test runs itself over the naive reference model.
#include <gtest/gtest.h>

#include <algorithm>

#include "actors/llm_engine.h"
#include "model/loader/llama_weights.h"
#include "model/sampler.h"
#include "tests/model/reference_llama.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

TEST(Penalties, GreedyWithPenaltiesMatchesAReferenceLoop) {
  EngineConfig config;
  config.model_dir = testing::stories260k_dir();
  config.num_kv_blocks = 64;
  LlmEngine engine(config);
  const std::vector<int32_t> prompt = engine.tokenizer().encode("Once upon a time");

  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 40;
  p.ignore_eos = true;
  const auto run = [&](const model::SamplingParams& params) {
    const uint64_t id = engine.add_request(prompt, params);
    std::vector<int32_t> tokens;
    while (engine.has_unfinished_requests()) {
      for (const RequestOutput& out : engine.step()) {
        if (out.request_id == id && out.finished) tokens = out.outputs.at(0).token_ids;
      }
    }
    return tokens;
  };
  const std::vector<int32_t> plain = run(p);
  p.presence_penalty = 0.7f;
  p.frequency_penalty = 0.4f;
  p.repetition_penalty = 1.3f;
  const std::vector<int32_t> penalised = run(p);
  EXPECT_NE(plain, penalised) << "penalties changed nothing";

  const model::LlamaWeights weights = model::load_llama_weights(config.model_dir);
  testing::ReferenceLlama reference(weights);
  std::vector<float> logits;
  for (int32_t t : prompt) logits = reference.next(t);
  std::vector<int32_t> expected;
  while (expected.size() < 40) {
    model::apply_penalties(logits, p, prompt, expected);
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    expected.push_back(next);
    logits = reference.next(next);
  }
  EXPECT_EQ(penalised, expected);
}

}  // namespace
}  // namespace pagedserve::actors
