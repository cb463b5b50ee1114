// The engine with a model whose every layer has a sliding window: releasing the KV blocks the
// window has passed (EngineConfig::free_blocks_outside_window, BlockManager's sliding window)
// changes no token, greedy, sampled with forks (n = 2) or beam search, with or without overlap
// scheduling and prefix caching; and a long generation holds about window / block_size + 2
// blocks per sequence instead of one block per block_size tokens. The model is stories260K's
// weights declared as MistralForCausalLM with sliding_window 16, so the window changes the
// logits well within the generation (checked against the same weights without a window).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/llm_engine.h"
#include "tests/actors/engine_test_util.h"
#include "tests/actors/windowed_stories.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

using testing_util::Finished;

constexpr int kWindow = 16;
constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = kWindow / kBlockSize + 2;  // what a decoding sequence may hold

EngineConfig engine_config(bool free_blocks, bool caching, int num_kv_blocks) {
  EngineConfig config;
  config.model_dir = testing::windowed_stories_dir(kWindow);
  config.block_size = kBlockSize;
  config.num_kv_blocks = num_kv_blocks;
  config.max_model_len = 256;
  config.enable_prefix_caching = caching;
  config.free_blocks_outside_window = free_blocks;
  config.num_threads = 1;
  return config;
}

model::SamplingParams long_params(int max_tokens) {
  model::SamplingParams p = testing_util::greedy(max_tokens);
  p.ignore_eos = true;
  return p;
}

// Greedy, sampled n = 2 (a fork sharing the prompt's blocks) and a beam search of width 2,
// all longer than the window many times over.
std::map<uint64_t, Finished> run_mix(LlmEngine& engine, int* peak_used) {
  const std::vector<int32_t> prompt = engine.tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big red ball under a tree.");
  engine.add_request(prompt, long_params(150));
  model::SamplingParams sampled = long_params(150);
  sampled.temperature = 0.8f;
  sampled.n = 2;
  sampled.seed = 7;
  engine.add_request(prompt, sampled);
  model::SamplingParams beam = long_params(60);
  beam.n = 2;
  beam.use_beam_search = true;
  engine.add_request(std::vector<int32_t>(prompt.begin(), prompt.begin() + 9), beam);
  std::map<uint64_t, Finished> out;
  *peak_used = 0;
  while (engine.has_unfinished_requests()) {
    testing_util::collect(out, engine.step());
    *peak_used = std::max(*peak_used, engine.scheduler().block_manager().num_used_device_blocks());
    EXPECT_EQ(engine.scheduler().block_manager().check_invariants(), "");
  }
  return out;
}

std::vector<std::vector<int32_t>> final_tokens(const std::map<uint64_t, Finished>& runs) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& [id, f] : runs) {
    EXPECT_TRUE(f.finished) << "request " << id;
    EXPECT_TRUE(f.last.error.empty()) << f.last.error;
    for (const CompletionOutput& c : f.last.outputs) out.push_back(c.token_ids);
  }
  return out;
}

struct Mode {
  bool overlap;
  bool caching;
  bool chunked;  // prompts prefilled 12 tokens a step: windows release between chunks
};

class SlidingWindowEngine : public ::testing::TestWithParam<Mode> {};

TEST_P(SlidingWindowEngine, FreeingBlocksChangesNoTokenAndBoundsTheBlocks) {
  const Mode mode = GetParam();
  EngineConfig freeing_config = engine_config(true, mode.caching, 64);
  EngineConfig keeping_config = engine_config(false, mode.caching, 1024);
  if (mode.chunked)
    freeing_config.max_num_batched_tokens = keeping_config.max_num_batched_tokens = 12;
  LlmEngine freeing(freeing_config, mode.overlap);
  LlmEngine keeping(keeping_config, mode.overlap);
  ASSERT_EQ(freeing.model_config().max_window_of_all_layers(), kWindow);
  int peak_freeing = 0, peak_keeping = 0;
  const auto got = final_tokens(run_mix(freeing, &peak_freeing));
  const auto want = final_tokens(run_mix(keeping, &peak_keeping));
  ASSERT_EQ(got.size(), 5u);  // 1 greedy + 2 sampled + 2 beams
  EXPECT_EQ(got, want);
  for (const auto& tokens : got) EXPECT_GE(tokens.size(), 60u);
  // 2 + 2 + 3 (beam candidates: 2 * width - 1) sequences at most, each within its window,
  // in a pool of 64 blocks where keeping every block took several times that.
  EXPECT_LE(peak_freeing, 7 * kBlocksPerSeq);
  EXPECT_GT(peak_keeping, 3 * peak_freeing);
  EXPECT_EQ(freeing.stats().num_preemptions_recompute + freeing.stats().num_preemptions_swap, 0);
  testing_util::expect_all_blocks_free(freeing);
}

INSTANTIATE_TEST_SUITE_P(Modes, SlidingWindowEngine,
                         ::testing::Values(Mode{false, true, false}, Mode{true, true, false},
                                           Mode{false, false, false}, Mode{true, false, true},
                                           Mode{false, true, true}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param.overlap ? "overlap" : "sync") +
                                  (info.param.caching ? "_caching" : "_nocaching") +
                                  (info.param.chunked ? "_chunked" : "");
                         });

// One long greedy generation: after its first step the sequence never holds more than
// window / block_size + 2 blocks, while without freeing it holds one per block_size tokens.
TEST(SlidingWindowEngineBlocks, ALongGenerationHoldsOnlyItsWindow) {
  for (bool free_blocks : {true, false}) {
    SCOPED_TRACE(free_blocks ? "freeing" : "keeping");
    LlmEngine engine(engine_config(free_blocks, true, 128));
    const std::vector<int32_t> prompt = engine.tokenizer().encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside.");
    engine.add_request(prompt, long_params(200));
    int steps = 0, last_used = 0;
    while (engine.has_unfinished_requests()) {
      engine.step();
      last_used = engine.scheduler().block_manager().num_used_device_blocks();
      if (free_blocks && ++steps > 1 && engine.has_unfinished_requests()) {
        ASSERT_LE(last_used, kBlocksPerSeq) << "step " << steps;
      }
    }
    if (!free_blocks) {
      // Until it finished, the sequence held every block of its prompt and output.
      EXPECT_GE(engine.stats().peak_used_blocks,
                static_cast<int>(prompt.size() + 199) / kBlockSize);
    }
    EXPECT_EQ(last_used, 0);
  }
}

// The window really changes the tokens: the same weights without one generate others, so the
// comparison above would see a kernel that read a released block's stale or reused contents.
TEST(SlidingWindowEngineBlocks, TheWindowMattersForThisModel) {
  EngineConfig windowed = engine_config(true, true, 128);
  EngineConfig full = windowed;
  full.model_dir = testing::stories260k_dir();
  std::vector<std::vector<int32_t>> outputs;
  for (const EngineConfig& config : {windowed, full}) {
    LlmEngine engine(config);
    engine.add_request(engine.tokenizer().encode("Once upon a time, there was a little girl"),
                       long_params(80));
    outputs.push_back(testing_util::run_to_completion(engine).begin()->second.tokens());
  }
  EXPECT_NE(outputs[0], outputs[1]);
}

// The actor system (the BlockManager in the prefix-cache actor, the scheduler planning from its
// mirror) under memory pressure: 8 requests, some forked, in 40 blocks, so sequences whose
// windows released blocks are preempted by swap or by recompute and resumed. Every output
// equals the synchronous engine's with every block kept in a large pool.
TEST(SlidingWindowEngineActors, PreemptedWindowedSequencesResumeWithTheSameTokens) {
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Tom", "The cat sat",
                                            "One day, a little bird"};
  std::vector<std::pair<std::vector<int32_t>, model::SamplingParams>> requests;
  std::map<uint64_t, Finished> expected;
  {
    EngineConfig config = engine_config(false, true, 1024);
    config.max_model_len = 160;
    LlmEngine reference(config);
    for (int i = 0; i < 8; ++i) {
      model::SamplingParams p = long_params(60 + 10 * (i % 4));
      p.temperature = 0.9f;
      p.seed = 40 + i;
      if (i % 3 == 1) p.n = 2;
      requests.emplace_back(reference.tokenizer().encode(prompts[i % prompts.size()]), p);
      reference.add_request(requests.back().first, p);
    }
    expected = testing_util::run_to_completion(reference);
  }
  int64_t preemptions = 0;
  for (auto [mode, overlap] :
       {std::pair{PreemptionMode::kSwap, true}, std::pair{PreemptionMode::kRecompute, true},
        std::pair{PreemptionMode::kSwap, false}}) {
    SCOPED_TRACE(std::string(preemption_mode_name(mode)) + (overlap ? ", overlap" : ""));
    EngineConfig config = engine_config(true, true, 40);
    config.max_model_len = 160;
    config.preemption_mode = mode;
    if (mode == PreemptionMode::kSwap) config.swap_space_bytes = int64_t{8} << 20;
    EngineOptions options;
    options.overlap = overlap;
    auto engine = Engine::start(config, options);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& [prompt, params] : requests) {
      GenerateRequest r;
      r.prompt_token_ids = prompt;
      r.sampling = params;
      streams.push_back(engine->submit(r));
    }
    uint64_t request_id = 1;  // the reference numbered its requests from 1 in this order
    for (auto& stream : streams) {
      std::map<int, std::vector<int32_t>> got;
      while (std::optional<TokenEvent> event = stream->next()) {
        got[event->index].insert(got[event->index].end(), event->token_ids.begin(),
                                 event->token_ids.end());
        if (event->finished) {
          EXPECT_NE(event->finish_reason, "error") << event->error;
        }
      }
      const Finished& want = expected.at(request_id++);
      ASSERT_EQ(got.size(), want.last.outputs.size());
      for (const CompletionOutput& c : want.last.outputs) EXPECT_EQ(got[c.index], c.token_ids);
    }
    const EngineStats stats = engine->stats();
    preemptions += stats.num_preemptions_swap + stats.num_preemptions_recompute;
  }
  EXPECT_GT(preemptions, 0);
}

}  // namespace
}  // namespace pagedserve::actors
