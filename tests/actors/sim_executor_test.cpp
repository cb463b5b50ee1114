// The simulated executor: the cost model's arithmetic by hand, the virtual clock, fixed
// samples, the profile's validation, and the least-squares fit recovering known coefficients.
#include "actors/sim_executor.h"

#include <gtest/gtest.h>

namespace pagedserve::actors {
namespace {

SimProfile profile() {
  SimProfile p;
  p.step_overhead_s = 0.01;
  p.per_batched_token_s = 0.001;
  p.per_kv_token_read_s = 0.0001;
  p.swap_bytes_per_s = 1000.0;
  p.swap_per_block_s = 0.5;
  p.copy_bytes_per_s = 4000.0;
  p.kv_bytes_per_token = 10;
  p.kv_cache_bytes = 10 * 4 * 8;
  return p;
}

ScheduledSequence seq(int computed, int fresh, bool sample) {
  ScheduledSequence s;
  s.num_computed_tokens = computed;
  s.new_token_ids.assign(fresh, 3);
  s.sample = sample;
  if (sample) s.sample_seeds = {1, 2};
  return s;
}

TEST(SimExecutor, StepTimeIsTheCostModel) {
  StepInput input;
  input.seqs = {seq(0, 5, true), seq(20, 1, true)};  // a prompt of 5, a decode at 20
  input.swap_out = {{0, 0}};
  input.swap_in = {{1, 1}, {2, 2}};
  input.block_copies = {{3, 4}};
  const StepShape shape = step_shape(input);
  EXPECT_EQ(shape.batched_tokens, 6);
  EXPECT_EQ(shape.kv_tokens_read, 5 + 21);
  EXPECT_EQ(shape.swapped_blocks, 3);
  EXPECT_EQ(shape.copied_blocks, 1);
  // Block of 4 tokens = 40 bytes: swap 3 x (0.5 + 40/1000), copy 40/4000.
  const double expected = 0.01 + 0.001 * 6 + 0.0001 * 26 + 3 * (0.5 + 0.04) + 0.01;
  EXPECT_NEAR(step_seconds(profile(), shape, 4), expected, 1e-12);
}

TEST(SimExecutor, AdvancesAVirtualClockAndSamplesFixedTokens) {
  SimExecutor executor(profile(), 4, 8, 0);
  EXPECT_EQ(executor.now_s(), 0.0);
  executor.advance_to(2.0);
  executor.advance_to(1.0);  // never backwards
  EXPECT_EQ(executor.now_s(), 2.0);
  StepInput input;
  input.seqs = {seq(0, 3, false), seq(7, 1, true)};
  input.seqs[1].num_top_logprobs = 4;
  const StepOutput out = executor.execute(input);
  EXPECT_NEAR(executor.last_step_s(), 0.01 + 0.001 * 4 + 0.0001 * (3 + 8), 1e-12);
  EXPECT_NEAR(executor.now_s(), 2.0 + executor.last_step_s(), 1e-12);
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_TRUE(out.seqs[0].samples.empty());
  ASSERT_EQ(out.seqs[1].samples.size(), 2u);
  EXPECT_EQ(out.seqs[1].samples[0].token_id, SimExecutor::kSampledToken);
  ASSERT_EQ(out.seqs[1].top_logprobs.size(), 4u);
  EXPECT_GT(out.seqs[1].top_logprobs[0].logprob, out.seqs[1].top_logprobs[3].logprob);
  // An empty step costs nothing (the engine only idles).
  executor.execute(StepInput{});
  EXPECT_EQ(executor.last_step_s(), 0.0);
}

TEST(SimExecutor, ProfileValidationNamesTheField) {
  nlohmann::json json = sim_profile_to_json(profile());
  EXPECT_EQ(sim_profile_from_json(json).kv_bytes_per_token, 10);
  json.erase("per_batched_token_s");
  try {
    sim_profile_from_json(json);
    FAIL() << "accepted a profile without per_batched_token_s";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("per_batched_token_s"), std::string::npos);
  }
  json = sim_profile_to_json(profile());
  json["step_overhead_s"] = -1;
  EXPECT_THROW(sim_profile_from_json(json), std::invalid_argument);
  EXPECT_THROW(load_sim_profile("/nonexistent.json"), std::invalid_argument);
}

StepShape shape_of(int64_t batched, int64_t kv, int64_t swapped = 0, int64_t copied = 0) {
  StepShape s;
  s.batched_tokens = batched;
  s.kv_tokens_read = kv;
  s.swapped_blocks = swapped;
  s.copied_blocks = copied;
  return s;
}

// With weights_read_s (w) set the step is a roofline: a + max(w + c * kv, b * tokens). Here
// a = 0.01, b = 0.001, c = 1e-6, w = 0.05.
TEST(SimExecutor, RooflineStepTimeTakesTheLargerOfMemoryAndCompute) {
  SimProfile p = profile();
  p.per_kv_token_read_s = 1e-6;
  p.weights_read_s = 0.05;
  // Decode-like: 32 sequences of 500 cached tokens. Memory 0.05 + 0.016 = 0.066 beats compute
  // 0.032.
  EXPECT_NEAR(step_seconds(p, shape_of(32, 32 * 500), 4), 0.01 + 0.066, 1e-12);
  // A 2000-token prefill: compute 2.0 beats memory 0.05 + 0.002.
  EXPECT_NEAR(step_seconds(p, shape_of(2000, 2000), 4), 0.01 + 2.0, 1e-12);
  // One decode of a short sequence: still the weights (0.05 + 1e-5 vs 0.001).
  EXPECT_NEAR(step_seconds(p, shape_of(1, 10), 4), 0.01 + 0.05 + 1e-5, 1e-12);
  // Swaps and copies add to either: 1 swapped block 0.5 + 40 / 1000, 2 copies 2 x 40 / 4000.
  EXPECT_NEAR(step_seconds(p, shape_of(2000, 2000, 1, 2), 4), 0.01 + 2.0 + 0.54 + 0.02, 1e-12);
  EXPECT_NEAR(step_seconds(p, shape_of(0, 0, 1, 0), 4), 0.54, 1e-12);  // no compute: no a, no w
  EXPECT_EQ(step_seconds(p, shape_of(0, 0), 4), 0.0);

  // w = 0: the linear model a + b * tokens + c * kv, whatever the shape.
  p.weights_read_s = 0.0;
  EXPECT_NEAR(step_seconds(p, shape_of(32, 32 * 500), 4), 0.01 + 0.032 + 0.016, 1e-12);
  EXPECT_NEAR(step_seconds(p, shape_of(2000, 2000), 4), 0.01 + 2.0 + 0.002, 1e-12);

  // The executor charges the same: a prompt of 5 and a decode at 20 read 5 + 21 tokens; memory
  // 0.05 + 26e-6 beats compute 0.006.
  p.weights_read_s = 0.05;
  SimExecutor executor(p, 4, 8, 0);
  StepInput input;
  input.seqs = {seq(0, 5, true), seq(20, 1, true)};
  executor.execute(input);
  EXPECT_NEAR(executor.last_step_s(), 0.01 + 0.05 + 26e-6, 1e-12);
}

TEST(SimExecutor, ProfileJsonReadsAndWritesWeightsRead) {
  nlohmann::json json = sim_profile_to_json(profile());
  // Optional, default 0 (the linear model); the writer always writes it.
  ASSERT_TRUE(json.contains("weights_read_s"));
  EXPECT_EQ(json["weights_read_s"].get<double>(), 0.0);
  json.erase("weights_read_s");
  EXPECT_EQ(sim_profile_from_json(json).weights_read_s, 0.0);

  SimProfile with = profile();
  with.weights_read_s = 0.0125;
  json = sim_profile_to_json(with);
  EXPECT_EQ(json["weights_read_s"].get<double>(), 0.0125);
  EXPECT_EQ(sim_profile_from_json(json).weights_read_s, 0.0125);
  json["weights_read_s"] = 0.25;
  EXPECT_EQ(sim_profile_from_json(json).weights_read_s, 0.25);

  for (const nlohmann::json& bad : {nlohmann::json(-0.001), nlohmann::json("0.1")}) {
    json["weights_read_s"] = bad;
    try {
      sim_profile_from_json(json);
      ADD_FAILURE() << "accepted weights_read_s = " << bad.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("weights_read_s"), std::string::npos) << e.what();
    }
  }
}

// Beam candidates: the default ranking is the same for every sequence; drawn ones differ
// between sequences (so beam search forks from several beams), repeat for the same
// (sequence, position), and always fall in logprob with distinct tokens.
TEST(SimExecutor, DrawnBeamCandidatesDifferPerSequenceAndFall) {
  auto candidates = [](SimExecutor& executor, uint64_t seq_id, int position) {
    StepInput input;
    ScheduledSequence s = seq(position, 1, true);
    s.seq_id = seq_id;
    s.num_top_logprobs = 6;
    input.seqs = {s};
    return executor.execute(input).seqs[0].top_logprobs;
  };
  SimExecutor fixed(profile(), 4, 8, 0);
  const auto a = candidates(fixed, 1, 10);
  const auto b = candidates(fixed, 2, 10);
  ASSERT_EQ(a.size(), 6u);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].logprob, b[k].logprob);

  SimExecutor drawn(profile(), 4, 8, 0);
  drawn.set_random_beam_candidates(7);
  const auto c = candidates(drawn, 1, 10);
  const auto d = candidates(drawn, 2, 10);
  const auto c_again = candidates(drawn, 1, 10);
  ASSERT_EQ(c.size(), 6u);
  bool differ = false;
  for (size_t k = 0; k < c.size(); ++k) {
    differ |= c[k].logprob != d[k].logprob;
    EXPECT_EQ(c[k].logprob, c_again[k].logprob);
    EXPECT_LT(c[k].logprob, 0.0f);
    if (k > 0) {
      EXPECT_LT(c[k].logprob, c[k - 1].logprob);
      EXPECT_NE(c[k].token_id, c[k - 1].token_id);
    }
  }
  EXPECT_TRUE(differ);
}

TEST(SimExecutor, FitRecoversKnownCoefficients) {
  std::vector<StepSample> samples;
  for (int b : {1, 4, 16, 64}) {
    for (int kv : {10, 100, 1000}) {
      StepSample s;
      s.shape.batched_tokens = b;
      s.shape.kv_tokens_read = kv + b;
      s.seconds = 0.02 + 0.003 * b + 0.00005 * (kv + b);
      samples.push_back(s);
    }
  }
  const CostFit fit = fit_cost_model(samples);
  EXPECT_NEAR(fit.a, 0.02, 1e-9);
  EXPECT_NEAR(fit.b, 0.003, 1e-9);
  EXPECT_NEAR(fit.c, 0.00005, 1e-10);
  EXPECT_LT(fit.rms_error_s, 1e-9);
  // Collinear samples (kv always = batched) cannot separate b from c.
  std::vector<StepSample> collinear;
  for (int b : {1, 2, 3, 4}) collinear.push_back({{b, b, 0, 0}, 0.01 * b});
  EXPECT_THROW(fit_cost_model(collinear), std::invalid_argument);
  EXPECT_THROW(fit_cost_model({}), std::invalid_argument);
}

}  // namespace
}  // namespace pagedserve::actors

#include <filesystem>
#include <fstream>

#include "actors/llm_engine.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

// --device sim through the engine: the tokenizer from the model folder, no weights, fixed
// tokens until max_tokens, the pool sized from the profile.
TEST(SimExecutor, EngineRunsOnTheSimDevice) {
  const std::filesystem::path profile_path =
      std::filesystem::temp_directory_path() / ("sim_profile_" + std::to_string(getpid()));
  std::ofstream(profile_path) << sim_profile_to_json(profile()).dump();
  EngineConfig config;
  config.model_dir = testing::stories260k_dir();
  config.device = "sim";
  config.sim_profile = profile_path;
  config.block_size = 4;
  config.max_model_len = 32;  // the whole 8-block pool
  LlmEngine engine(config);
  EXPECT_EQ(engine.config().num_kv_blocks, 8);  // 320 bytes / (10 bytes x 4 tokens)
  model::SamplingParams params;
  params.max_tokens = 5;
  params.temperature = 0.0f;
  const uint64_t id = engine.add_request({1, 2, 3}, params);
  std::vector<int32_t> tokens;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.request_id != id) continue;
      for (const SequenceOutput& d : out.deltas) {
        tokens.insert(tokens.end(), d.new_token_ids.begin(), d.new_token_ids.end());
      }
    }
  }
  EXPECT_EQ(tokens, std::vector<int32_t>(5, SimExecutor::kSampledToken));
  config.device = "gpu";
  EXPECT_THROW(LlmEngine{config}, std::invalid_argument);
  std::filesystem::remove(profile_path);
}

}  // namespace
}  // namespace pagedserve::actors
