// Logprobs through the Engine (executor -> scheduler -> tokenizer actor -> TokenEvent), checked
// against a hand computation: log_softmax, in double precision, of the logits of the naive
// reference forward pass (tests/model/reference_llama.h) fed the same prompt and the tokens
// the engine generated. They are raw logprobs (vLLM v1's logprobs_mode=raw_logprobs): the
// penalised, temperature-scaled, top-k filtered request below reports the same values as the
// unmodified model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "actors/engine.h"
#include "model/loader/llama_weights.h"
#include "tests/model/reference_llama.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

constexpr double kTolerance = 1e-4;

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  TokenEvent last;
};

Collected run(Engine& engine, const std::vector<int32_t>& prompt, model::SamplingParams sampling) {
  GenerateRequest request;
  request.prompt_token_ids = prompt;
  request.sampling = std::move(sampling);
  std::shared_ptr<RequestStream> stream = engine.submit(std::move(request));
  Collected out;
  while (std::optional<TokenEvent> event = stream->next()) {
    out.tokens.insert(out.tokens.end(), event->token_ids.begin(), event->token_ids.end());
    out.logprobs.insert(out.logprobs.end(), event->logprobs.begin(), event->logprobs.end());
    out.last = std::move(*event);
  }
  return out;
}

std::vector<double> log_softmax(const std::vector<float>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double lse = max + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - lse;
  return out;
}

class LogprobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineConfig config;
    config.model_dir = testing::stories260k_dir();
    config.num_kv_blocks = 256;
    engine_ = Engine::start(config).release();
    weights_ = new model::LlamaWeights(model::load_llama_weights(config.model_dir));
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete weights_;
  }

  // Replays prompt + generated through the reference model and checks every reported
  // logprob (and the top k) against log_softmax of its logits.
  static void expect_matches_reference(const std::vector<int32_t>& prompt, const Collected& got,
                                       int k) {
    ASSERT_EQ(got.logprobs.size(), got.tokens.size());
    testing::ReferenceLlama reference(*weights_);
    std::vector<float> logits;
    for (int32_t t : prompt) logits = reference.next(t);
    const model::Tokenizer& tokenizer = engine_->tokenizer();
    for (size_t i = 0; i < got.tokens.size(); ++i) {
      SCOPED_TRACE("generated token " + std::to_string(i));
      const std::vector<double> expected = log_softmax(logits);
      const TokenLogprobs& lp = got.logprobs[i];
      EXPECT_EQ(lp.sampled.token_id, got.tokens[i]);
      EXPECT_NEAR(lp.sampled.logprob, expected[got.tokens[i]], kTolerance);
      const int32_t ids[1] = {got.tokens[i]};
      EXPECT_EQ(lp.sampled.token, tokenizer.decode(ids, false, false));
      EXPECT_EQ(lp.sampled.bytes, tokenizer.token_bytes(got.tokens[i]));

      std::vector<int32_t> order(expected.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return expected[a] > expected[b]; });
      ASSERT_EQ(lp.top.size(), static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) {
        // The j-th best value must agree; the id too unless a near-tie makes the order moot.
        EXPECT_NEAR(lp.top[j].logprob, expected[order[j]], kTolerance) << "rank " << j;
        EXPECT_NEAR(lp.top[j].logprob, expected[lp.top[j].token_id], kTolerance) << "rank " << j;
        if (j + 1 < k && expected[order[j]] - expected[order[j + 1]] > 1e-3) {
          EXPECT_EQ(lp.top[j].token_id, order[j]) << "rank " << j;
        }
      }
      logits = reference.next(got.tokens[i]);
    }
  }

  static Engine* engine_;
  static model::LlamaWeights* weights_;
};

Engine* LogprobsTest::engine_ = nullptr;
model::LlamaWeights* LogprobsTest::weights_ = nullptr;

TEST_F(LogprobsTest, GreedyLogprobsAreLogSoftmaxOfReferenceLogits) {
  const std::vector<int32_t> prompt = engine_->tokenizer().encode("Once upon a time");
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.logprobs = 5;
  const Collected got = run(*engine_, prompt, p);
  ASSERT_EQ(got.last.finish_reason, "length") << got.last.error;
  ASSERT_EQ(got.tokens.size(), 24u);
  expect_matches_reference(prompt, got, 5);
  // Greedy takes the argmax: its logprob is the top one.
  for (const TokenLogprobs& lp : got.logprobs) {
    EXPECT_EQ(lp.sampled.token_id, lp.top.front().token_id);
  }
}

// Penalties, temperature and top-k change what is drawn, not what is reported.
TEST_F(LogprobsTest, SampledWithPenaltiesReportsRawLogprobs) {
  const std::vector<int32_t> prompt = engine_->tokenizer().encode("Lily and Tom went");
  model::SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 5;
  p.seed = 1234;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 1.0f;
  p.max_tokens = 20;
  p.ignore_eos = true;
  p.logprobs = 3;
  const Collected got = run(*engine_, prompt, p);
  ASSERT_EQ(got.last.finish_reason, "length") << got.last.error;
  expect_matches_reference(prompt, got, 3);
}

TEST_F(LogprobsTest, ZeroTopCandidatesStillReportsTheSampledToken) {
  const std::vector<int32_t> prompt = engine_->tokenizer().encode("Once upon a time");
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.logprobs = 0;
  const Collected got = run(*engine_, prompt, p);
  expect_matches_reference(prompt, got, 0);
}

TEST_F(LogprobsTest, NoLogprobsUnlessAsked) {
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 6;
  const Collected got = run(*engine_, engine_->tokenizer().encode("Once upon a time"), p);
  EXPECT_FALSE(got.tokens.empty());
  EXPECT_TRUE(got.logprobs.empty());
}

// n > 1: the prompt's one row of logits serves every child's first draw; each output's
// logprobs follow its own tokens.
TEST_F(LogprobsTest, EveryOutputOfNGetsItsOwnLogprobs) {
  const std::vector<int32_t> prompt = engine_->tokenizer().encode("One day");
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  p.n = 3;
  p.max_tokens = 8;
  p.ignore_eos = true;
  p.logprobs = 2;
  GenerateRequest request;
  request.prompt_token_ids = prompt;
  request.sampling = p;
  std::shared_ptr<RequestStream> stream = engine_->submit(std::move(request));
  std::map<int, Collected> outputs;
  while (std::optional<TokenEvent> event = stream->next()) {
    Collected& c = outputs[event->index];
    ASSERT_EQ(event->logprobs.size(), event->token_ids.size());
    c.tokens.insert(c.tokens.end(), event->token_ids.begin(), event->token_ids.end());
    c.logprobs.insert(c.logprobs.end(), event->logprobs.begin(), event->logprobs.end());
  }
  ASSERT_EQ(outputs.size(), 3u);
  for (const auto& [index, c] : outputs) {
    SCOPED_TRACE("output " + std::to_string(index));
    EXPECT_EQ(c.tokens.size(), 8u);
    expect_matches_reference(prompt, c, 2);
  }
}

TEST_F(LogprobsTest, BeamSearchWithLogprobsIsRefused) {
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.use_beam_search = true;
  p.n = 2;
  p.logprobs = 1;
  const Collected got = run(*engine_, engine_->tokenizer().encode("Once"), p);
  EXPECT_EQ(got.last.finish_reason, "error");
  EXPECT_NE(got.last.error.find("logprobs is not supported with use_beam_search"),
            std::string::npos)
      << got.last.error;
}

}  // namespace
}  // namespace pagedserve::actors
