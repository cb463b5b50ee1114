// The scheduler's policy end to end on the real stories260K model: a request's greedy output is
// the same token for token alone, among 64 others, with chunked prefill, after swap or
// recompute, and with prefix-cache hits; memory pressure completes in both preemption modes;
// parallel sampling shares the prompt's blocks; stop strings, beam search and aborts. Every
// one of these runs both with the synchronous loop and with overlap scheduling (LlmEngine's
// overlapped loop: step N+1 planned before N's results are applied, with placeholders), and
// must give the same tokens both ways.
#include <gtest/gtest.h>

#include <set>

#include "actors/llm_engine.h"
#include "tests/actors/engine_test_util.h"

namespace pagedserve::actors {
namespace {

using namespace testing_util;

constexpr int64_t kSwapBytes = int64_t{8} << 20;  // ~400 blocks of 16 for stories260K

const char* const kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends. One day, she saw a big, red ball under a tree. She ran to the ball "
    "and picked it up. Her mom said it was time to go home, so Lily took the ball with her and "
    "they walked back together, singing a happy song about the sun and the sky.";

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<model::SamplingParams> params;
};

// Mixed lengths; prompts starting at the same offset share a prefix (prefix-cache hits).
Workload mixed_workload(const model::Tokenizer& tokenizer, int count, int max_prompt) {
  const std::vector<int32_t> story = tokenizer.encode(kStory, false);
  Workload w;
  for (int i = 0; i < count; ++i) {
    const int start = (i % 4) * 9;
    const int length = 3 + (i * 13) % max_prompt;
    std::vector<int32_t> prompt = {1};
    prompt.insert(prompt.end(), story.begin() + start,
                  story.begin() + std::min<int>(start + length, static_cast<int>(story.size())));
    w.prompts.push_back(std::move(prompt));
    model::SamplingParams p = greedy(8 + (i * 7) % 32);
    p.ignore_eos = i % 3 == 0;
    w.params.push_back(p);
  }
  return w;
}

// Each request alone on an engine without prefix caching: the reference outputs.
std::vector<std::vector<int32_t>> run_alone(const Workload& w) {
  EngineConfig config = stories_config();
  config.enable_prefix_caching = false;
  LlmEngine engine(config);
  std::vector<std::vector<int32_t>> outputs;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    const uint64_t id = engine.add_request(w.prompts[i], w.params[i]);
    auto done = run_to_completion(engine);
    outputs.push_back(done[id].last.outputs.at(0).token_ids);
    EXPECT_EQ(done[id].tokens(), outputs.back()) << "streamed tokens equal the final output";
  }
  return outputs;
}

// All requests at once; checks every output against the reference and returns the stats.
SchedulerStats run_together(const EngineConfig& config, const Workload& w,
                            const std::vector<std::vector<int32_t>>& alone, bool overlap) {
  SCOPED_TRACE(overlap ? "overlap" : "no overlap");
  LlmEngine engine(config, overlap);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    ids.push_back(engine.add_request(w.prompts[i], w.params[i]));
  }
  auto done = run_to_completion(engine);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!done[ids[i]].finished) {
      ADD_FAILURE() << "request " << i << " did not finish";
      continue;
    }
    EXPECT_EQ(done[ids[i]].last.error, "") << "request " << i;
    EXPECT_EQ(done[ids[i]].last.outputs.at(0).token_ids, alone[i]) << "request " << i;
    EXPECT_EQ(done[ids[i]].tokens(), alone[i]) << "request " << i << " (streamed)";
  }
  expect_all_blocks_free(engine);
  const SchedulerStats stats = engine.stats();
  EXPECT_EQ(stats.num_steps_planned_ahead > 0, overlap);
  return stats;
}

TEST(EngineBatching, GreedyOutputIsTheSameAloneBatchedChunkedSwappedRecomputedAndCached) {
  LlmEngine probe(stories_config());
  const Workload w = mixed_workload(probe.tokenizer(), 64, 50);
  const auto alone = run_alone(w);

  EngineConfig config = stories_config();
  config.max_model_len = 128;
  {
    SCOPED_TRACE("64 together, chunked prefill (48 tokens a step), prefix caching");
    config.num_kv_blocks = 512;
    config.max_num_batched_tokens = 48;
    for (bool overlap : {false, true}) {
      const SchedulerStats stats = run_together(config, w, alone, overlap);
      EXPECT_GT(stats.prefix_cache_hit_tokens, 0);
      EXPECT_EQ(stats.num_preemptions_swap + stats.num_preemptions_recompute, 0);
    }
  }
  config.num_kv_blocks = 40;
  config.max_num_batched_tokens = 256;
  {
    SCOPED_TRACE("40 blocks, swap");
    config.swap_space_bytes = kSwapBytes;
    config.preemption_mode = PreemptionMode::kSwap;
    for (bool overlap : {false, true}) {
      EXPECT_GT(run_together(config, w, alone, overlap).num_preemptions_swap, 0);
    }
  }
  {
    SCOPED_TRACE("40 blocks, recompute, no prefix caching");
    config.swap_space_bytes = 0;
    config.preemption_mode = PreemptionMode::kRecompute;
    config.enable_prefix_caching = false;
    for (bool overlap : {false, true}) {
      EXPECT_GT(run_together(config, w, alone, overlap).num_preemptions_recompute, 0);
    }
  }
}

TEST(EngineBatching, ThirtyTwoRequestsOnFortyBlocksCompleteInBothPreemptionModes) {
  LlmEngine probe(stories_config());
  Workload w = mixed_workload(probe.tokenizer(), 32, 30);
  for (model::SamplingParams& p : w.params) {
    p.max_tokens = 48;
    p.ignore_eos = true;
  }
  const auto alone = run_alone(w);
  for (auto [mode, overlap] :
       {std::pair{PreemptionMode::kSwap, false}, std::pair{PreemptionMode::kRecompute, false},
        std::pair{PreemptionMode::kSwap, true}, std::pair{PreemptionMode::kRecompute, true}}) {
    SCOPED_TRACE(preemption_mode_name(mode));
    EngineConfig config = stories_config();
    config.num_kv_blocks = 40;  // 32 requests of up to ~80 tokens need ~150 blocks
    config.max_model_len = 128;
    config.preemption_mode = mode;
    if (mode == PreemptionMode::kSwap) config.swap_space_bytes = kSwapBytes;
    const SchedulerStats stats = run_together(config, w, alone, overlap);
    const int64_t preemptions = mode == PreemptionMode::kSwap ? stats.num_preemptions_swap
                                                              : stats.num_preemptions_recompute;
    EXPECT_GT(preemptions, 0);
    EXPECT_LE(stats.peak_used_blocks, 40);
    std::cout << "[ stats    ] " << preemption_mode_name(mode) << (overlap ? " (overlap)" : "")
              << ": " << preemptions << " preemptions (swap " << stats.num_preemptions_swap
              << ", recompute " << stats.num_preemptions_recompute << "), peak "
              << stats.peak_used_blocks << " blocks, " << stats.num_steps << " steps\n";
  }
}

TEST(EngineBatching, ParallelSamplesShareThePromptBlocksAndDiffer) {
  std::vector<CompletionOutput> by_mode[2];
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    auto run = [overlap](int n, int& peak) {
      LlmEngine engine(stories_config(), overlap);
      const auto prompt = engine.tokenizer().encode(kStory);
      EXPECT_GT(prompt.size(), 64u);
      model::SamplingParams p;
      p.temperature = 0.8f;
      p.seed = 7;
      p.n = n;
      p.max_tokens = 16;
      p.ignore_eos = true;
      const uint64_t id = engine.add_request(prompt, p);
      auto done = run_to_completion(engine);
      expect_all_blocks_free(engine);
      peak = engine.stats().peak_used_blocks;
      return done[id];
    };
    int peak_one = 0, peak_four = 0;
    const Finished one = run(1, peak_one);
    const Finished four = run(4, peak_four);
    std::cout << "[ stats    ] peak blocks: n=1 " << peak_one << ", n=4 " << peak_four << "\n";
    EXPECT_LT(peak_four, 2 * peak_one) << "the prompt's blocks are held once";
    ASSERT_EQ(four.last.outputs.size(), 4u);
    std::set<std::vector<int32_t>> distinct;
    for (const CompletionOutput& c : four.last.outputs) {
      EXPECT_EQ(c.token_ids.size(), 16u);
      EXPECT_EQ(c.token_ids, four.streamed.at(c.index));
      EXPECT_EQ(c.text, four.streamed_text.at(c.index));
      distinct.insert(c.token_ids);
    }
    EXPECT_EQ(distinct.size(), 4u) << "the 4 samples differ";
    EXPECT_EQ(four.last.outputs[0].token_ids, one.last.outputs.at(0).token_ids)
        << "sample 0 draws from the request's own seed, as n = 1 does";
    by_mode[overlap] = four.last.outputs;
  }
  ASSERT_EQ(by_mode[0].size(), by_mode[1].size());
  for (size_t i = 0; i < by_mode[0].size(); ++i) {
    EXPECT_EQ(by_mode[1][i].token_ids, by_mode[0][i].token_ids) << "sample " << i;
  }
}

// Seeded sampling, n > 1, stop strings, penalties and min_tokens under memory pressure, with
// aborts mid-flight: every request that is not aborted returns exactly what it returns alone
// on a roomy engine (the independent reference), in both preemption modes, with overlap
// scheduling on and off; the aborted ones end with "abort"; every block comes back.
TEST(EngineBatching, SampledStoppedParallelAndAbortedRequestsAreTheSameWithOverlapOnAndOff) {
  LlmEngine probe(stories_config());
  Workload w = mixed_workload(probe.tokenizer(), 24, 30);
  for (size_t i = 0; i < w.params.size(); ++i) {
    model::SamplingParams& p = w.params[i];
    p.temperature = 0.8f;
    p.seed = 100 + i;
    p.max_tokens = 12 + static_cast<int>(i * 5) % 28;
    if (i % 4 == 1) p.n = 2 + static_cast<int>(i % 3);
    if (i % 3 == 2) p.stop = {"Lily", " the"};
    if (i % 5 == 3) p.presence_penalty = 0.5f;
    if (i % 6 == 4) p.min_tokens = 6;
  }
  const size_t num_kept = w.prompts.size();
  // Long requests that are aborted while running.
  for (int i = 0; i < 4; ++i) {
    w.prompts.push_back(w.prompts[i]);
    model::SamplingParams p = greedy(100);
    p.ignore_eos = true;
    w.params.push_back(p);
  }

  std::vector<std::vector<CompletionOutput>> alone;
  {
    EngineConfig config = stories_config();
    config.enable_prefix_caching = false;
    LlmEngine engine(config);
    for (size_t i = 0; i < num_kept; ++i) {
      const uint64_t id = engine.add_request(w.prompts[i], w.params[i]);
      alone.push_back(run_to_completion(engine)[id].last.outputs);
    }
  }
  for (auto [mode, overlap] :
       {std::pair{PreemptionMode::kSwap, false}, std::pair{PreemptionMode::kRecompute, false},
        std::pair{PreemptionMode::kSwap, true}, std::pair{PreemptionMode::kRecompute, true}}) {
    SCOPED_TRACE(std::string(preemption_mode_name(mode)) + (overlap ? ", overlap" : ""));
    EngineConfig config = stories_config();
    config.num_kv_blocks = 40;
    config.max_model_len = 128;
    config.preemption_mode = mode;
    if (mode == PreemptionMode::kSwap) config.swap_space_bytes = kSwapBytes;
    LlmEngine engine(config, overlap);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < w.prompts.size(); ++i) {
      ids.push_back(engine.add_request(w.prompts[i], w.params[i]));
    }
    std::map<uint64_t, Finished> done;
    for (int step = 0; engine.has_unfinished_requests() && step < 100000; ++step) {
      if (step == 6 || step == 11) {  // two aborts each time, while the steps are in flight
        engine.abort_request(ids[num_kept + (step == 6 ? 0 : 2)]);
        engine.abort_request(ids[num_kept + (step == 6 ? 1 : 3)]);
      }
      collect(done, engine.step());
    }
    for (size_t i = 0; i < num_kept; ++i) {
      const Finished& f = done[ids[i]];
      ASSERT_TRUE(f.finished) << "request " << i;
      ASSERT_EQ(f.last.outputs.size(), alone[i].size()) << "request " << i;
      for (size_t j = 0; j < alone[i].size(); ++j) {
        EXPECT_EQ(f.last.outputs[j].token_ids, alone[i][j].token_ids) << "request " << i;
        EXPECT_EQ(f.last.outputs[j].text, alone[i][j].text) << "request " << i;
        EXPECT_EQ(f.last.outputs[j].finish_reason, alone[i][j].finish_reason) << "request " << i;
      }
    }
    for (size_t i = num_kept; i < ids.size(); ++i) {
      EXPECT_TRUE(done[ids[i]].finished);
      EXPECT_EQ(done[ids[i]].finish_reason(), FinishReason::kAbort) << "request " << i;
    }
    const SchedulerStats stats = engine.stats();
    EXPECT_GT(mode == PreemptionMode::kSwap ? stats.num_preemptions_swap
                                            : stats.num_preemptions_recompute,
              0);
    expect_all_blocks_free(engine);
  }
}

TEST(EngineBatching, BestOfReturnsTheMostLikelySamples) {
  std::vector<std::vector<int32_t>> by_mode[2];
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    LlmEngine engine(stories_config(), overlap);
    model::SamplingParams p;
    p.seed = 3;
    p.n = 2;
    p.best_of = 5;
    p.max_tokens = 12;
    p.ignore_eos = true;
    const uint64_t id = engine.add_request(engine.tokenizer().encode("Lily and Tom"), p);
    auto done = run_to_completion(engine);
    const auto& outputs = done[id].last.outputs;
    ASSERT_EQ(outputs.size(), 2u);
    EXPECT_GE(outputs[0].cumulative_logprob, outputs[1].cumulative_logprob);
    EXPECT_LT(outputs[0].cumulative_logprob, 0.0);
    expect_all_blocks_free(engine);
    for (const CompletionOutput& c : outputs) by_mode[overlap].push_back(c.token_ids);
  }
  EXPECT_EQ(by_mode[1], by_mode[0]);
}

TEST(EngineBatching, StopStringEndsTheTextBeforeIt) {
  for (bool overlap : {false, true})
    for (const std::string& stop : {std::string("Lily"), std::string("little girl")}) {
      SCOPED_TRACE(overlap ? "overlap" : "no overlap");
      LlmEngine engine(stories_config(), overlap);
      model::SamplingParams p = greedy(40);
      p.stop = {"zzz", stop};
      const uint64_t id = engine.add_request(engine.tokenizer().encode("Once upon a time"), p);
      auto done = run_to_completion(engine);
      const CompletionOutput& out = done[id].last.outputs.at(0);
      const std::string expected =
          std::string(", there was a little girl named Lily.")
              .substr(0, std::string(", there was a little girl named Lily.").find(stop));
      EXPECT_EQ(out.text, expected);
      EXPECT_EQ(done[id].streamed_text[0], expected) << "nothing past the stop string streamed";
      EXPECT_EQ(out.finish_reason, FinishReason::kStop);
      EXPECT_LT(out.token_ids.size(), 15u);
      expect_all_blocks_free(engine);
    }
}

TEST(EngineBatching, BeamSearchIsDeterministicAndUnchangedBySwapping) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap (beam steps fall back to waiting)" : "no overlap");
    auto run = [overlap](EngineConfig config) {
      LlmEngine engine(config, overlap);
      model::SamplingParams p = greedy(24);
      p.use_beam_search = true;
      p.n = 2;
      p.best_of = 4;
      std::vector<uint64_t> ids;
      for (const char* prompt : {"Once upon a time", "The cat sat", "Tim had a red ball"}) {
        ids.push_back(engine.add_request(engine.tokenizer().encode(prompt), p));
      }
      auto done = run_to_completion(engine);
      expect_all_blocks_free(engine);
      std::vector<std::vector<CompletionOutput>> out;
      for (uint64_t id : ids) out.push_back(done[id].last.outputs);
      return std::make_pair(out, engine.stats());
    };
    const auto [roomy, roomy_stats] = run(stories_config());
    for (const auto& outputs : roomy) {
      ASSERT_EQ(outputs.size(), 2u);
      EXPECT_NE(outputs[0].token_ids, outputs[1].token_ids);
      EXPECT_FALSE(outputs[0].text.empty());
      EXPECT_NE(outputs[0].finish_reason, FinishReason::kNone);
    }
    EngineConfig tight = stories_config();
    tight.num_kv_blocks = 10;
    tight.max_model_len = 64;
    tight.swap_space_bytes = kSwapBytes;
    const auto [swapped, swapped_stats] = run(tight);
    EXPECT_GT(swapped_stats.num_preemptions_swap, 0);
    for (size_t i = 0; i < roomy.size(); ++i) {
      for (size_t j = 0; j < 2; ++j) {
        EXPECT_EQ(swapped[i][j].token_ids, roomy[i][j].token_ids)
            << "prompt " << i << " beam " << j;
      }
    }
  }
}

TEST(EngineBatching, AbortMidGenerationFreesEveryBlockOfEverySample) {
  LlmEngine engine(stories_config());
  model::SamplingParams p;
  p.seed = 1;
  p.n = 4;
  p.max_tokens = 100;
  p.ignore_eos = true;
  const uint64_t id = engine.add_request(engine.tokenizer().encode(kStory), p);
  std::map<uint64_t, Finished> done;
  for (int i = 0; i < 5; ++i) collect(done, engine.step());
  EXPECT_GT(engine.scheduler().block_manager().num_used_device_blocks(), 4);
  engine.abort_request(id);
  EXPECT_EQ(engine.scheduler().block_manager().num_used_device_blocks(), 0)
      << "abort frees every block at once";
  collect(done, engine.step());
  ASSERT_TRUE(done[id].finished);
  for (const CompletionOutput& c : done[id].last.outputs) {
    EXPECT_EQ(c.finish_reason, FinishReason::kAbort);
  }
  EXPECT_FALSE(engine.has_unfinished_requests());
  expect_all_blocks_free(engine);
}

// With overlap the next step already ran (its results not yet applied) when the abort comes:
// the request ends with "abort" at the next step, and its blocks come back once that step,
// which still held them, is retired; nothing leaks.
TEST(EngineBatching, AbortWithAStepInFlightFreesEveryBlockOnceTheStepIsRetired) {
  LlmEngine engine(stories_config(), /*overlap=*/true);
  model::SamplingParams p;
  p.seed = 1;
  p.n = 4;
  p.max_tokens = 100;
  p.ignore_eos = true;
  const uint64_t id = engine.add_request(engine.tokenizer().encode(kStory), p);
  std::map<uint64_t, Finished> done;
  for (int i = 0; i < 5; ++i) collect(done, engine.step());
  EXPECT_GT(engine.scheduler().block_manager().num_used_device_blocks(), 4);
  EXPECT_EQ(engine.scheduler().num_steps_in_flight(), 1u) << "a step ran ahead";
  engine.abort_request(id);
  EXPECT_GT(engine.scheduler().block_manager().num_used_device_blocks(), 0)
      << "the step in flight still holds them";
  collect(done, engine.step());
  ASSERT_TRUE(done[id].finished);
  for (const CompletionOutput& c : done[id].last.outputs) {
    EXPECT_EQ(c.finish_reason, FinishReason::kAbort);
  }
  EXPECT_FALSE(engine.has_unfinished_requests());
  EXPECT_EQ(engine.scheduler().num_steps_in_flight(), 0u);
  expect_all_blocks_free(engine);
}

}  // namespace
}  // namespace pagedserve::actors
