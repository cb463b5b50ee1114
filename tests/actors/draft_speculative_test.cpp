// Speculative decoding with a draft model, end to end: greedy outputs identical to the same
// requests without speculation, alone, in batches, with overlap, under preemption by swap and by
// recompute; sampled ones replaying their seeds; the draft's K/V kept in step with the target's,
// shown by its acceptance rate when the draft is the target's own twin (stories260K's GGUF file,
// the same trained model); accepted proposals hashed with their real ids (a later request hits
// their blocks); an unrelated draft changing nothing but the speed; bad settings refused by name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/llm_engine.h"
#include "model/quantize_gguf.h"
#include "model/synthetic_model.h"
#include "tests/actors/speculative_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

using namespace spec_testing;

std::string twin_draft() {
  return (pagedserve::testing::shared_dir() / "models" / "stories260K.gguf").string();
}

EngineConfig with_draft(EngineConfig config, int k = 4, int max_batch = 0,
                        const std::string& draft = twin_draft()) {
  config.speculative.method = SpeculativeMethod::kDraft;
  config.speculative.draft_model = draft;
  config.speculative.num_speculative_tokens = k;
  config.speculative.max_batch_seqs = max_batch;
  return config;
}

double acceptance(const EngineRun& run) {
  return run.stats.num_spec_proposed_tokens == 0
             ? 0.0
             : static_cast<double>(run.stats.num_spec_accepted_tokens) /
                   static_cast<double>(run.stats.num_spec_proposed_tokens);
}

// The twin proposes the target's own greedy tokens unless the draft's K/V are out of step
// with the sequence (stale after a swap, a recompute, a rejected proposal): nearly all are
// accepted. A draft reading stale K/V falls far below this.
constexpr double kTwinAcceptance = 0.9;

TEST(DraftSpeculative, GreedyIsIdenticalAndTheTwinIsAlmostAlwaysAccepted) {
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(96);
  const EngineRun baseline = run(plain, requests);
  const EngineRun alone = run(with_draft(plain), {requests.front()});
  expect_same_outputs(EngineRun{{baseline.outputs.front()}, {}}, alone, "alone");
  EXPECT_GT(acceptance(alone), kTwinAcceptance);
  EXPECT_LT(alone.stats.num_steps, baseline.stats.num_steps / 3);

  for (int k : {1, 4, 7}) {
    for (bool overlap : {false, true}) {
      const std::string what = "batch, K " + std::to_string(k) + (overlap ? ", overlap" : "");
      const EngineRun batched = run(with_draft(plain, k), requests, overlap);
      expect_same_outputs(baseline, batched, what);
      EXPECT_GT(acceptance(batched), kTwinAcceptance) << what;
      // Draft rows are planned past a verifying step too (their draft context set as if it
      // accepted everything, and moved back by the executor): with a wrong context the twin
      // would be accepted far less.
      if (overlap) EXPECT_GT(batched.stats.num_spec_rows_planned_ahead, 10) << what;
      EXPECT_LE(batched.stats.num_spec_accepted_tokens, batched.stats.num_spec_proposed_tokens);
    }
  }
  // The policy: no proposals while more than 3 sequences run (the longest requests go on
  // alone at the end); the draft catches up over the tokens it did not see.
  std::vector<Request> staggered = requests;
  for (size_t i = 0; i < staggered.size(); ++i) {
    staggered[i].params.max_tokens = 24 + 12 * static_cast<int>(i);
  }
  const EngineRun policy = run(with_draft(plain, 4, 3), staggered, /*overlap=*/true);
  expect_same_outputs(run(plain, staggered), policy, "max batch 3");
  EXPECT_GT(policy.stats.num_steps_planned_ahead, 0);
  EXPECT_GT(policy.stats.num_spec_rows, 0);
  EXPECT_GT(acceptance(policy), kTwinAcceptance);
}

TEST(DraftSpeculative, GreedyIsIdenticalUnderPreemptionBySwapAndRecompute) {
  EngineConfig small = testing_util::stories_config();
  small.block_size = 4;
  small.num_kv_blocks = 72;
  small.max_model_len = 240;
  const std::vector<Request> requests = story_requests(80, 60);
  EngineConfig roomy = small;
  roomy.num_kv_blocks = 1024;
  const EngineRun baseline = run(roomy, requests);
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    EngineConfig config = with_draft(small);
    config.preemption_mode = mode;
    if (mode == PreemptionMode::kSwap) config.swap_space_bytes = 4 << 20;
    const std::string what = preemption_mode_name(mode);
    const EngineRun got = run(config, requests);
    expect_same_outputs(baseline, got, what);
    const int64_t preemptions = mode == PreemptionMode::kSwap ? got.stats.num_preemptions_swap
                                                              : got.stats.num_preemptions_recompute;
    EXPECT_GT(preemptions, 0) << what << ": the pool was meant to be too small";
    // Swapped blocks carry the draft's K/V too; a recompute makes the draft catch up.
    EXPECT_GT(acceptance(got), kTwinAcceptance) << what;
  }
}

TEST(DraftSpeculative, AcceptedProposalsAreCachedUnderTheirRealIds) {
  const EngineConfig plain = testing_util::stories_config();
  const Tokens prompt = story_requests(1).front().prompt;
  // The second request's prompt is the first's prompt and output: every full block of it was
  // filled by the first request, mostly with accepted proposals.
  auto hits_of_second = [&](const EngineConfig& config) {
    LlmEngine engine(config);
    engine.add_request(prompt, greedy(70));
    const Tokens out = testing_util::run_to_completion(engine).begin()->second.tokens();
    Tokens extended = prompt;
    extended.insert(extended.end(), out.begin(), out.begin() + 60);
    const int64_t before = engine.scheduler().block_manager().prefix_cache_hits_tokens();
    engine.add_request(extended, greedy(8));
    testing_util::run_to_completion(engine);
    EXPECT_EQ(engine.scheduler().block_manager().check_invariants(), "");
    testing_util::expect_all_blocks_free(engine);
    return engine.scheduler().block_manager().prefix_cache_hits_tokens() - before;
  };
  const int64_t expected = hits_of_second(plain);
  const int block_size = plain.block_size;
  EXPECT_EQ(expected, (static_cast<int64_t>(prompt.size()) + 59) / block_size * block_size);
  EXPECT_EQ(hits_of_second(with_draft(plain)), expected);
}

// Sampled requests verify proposals drawn from the draft's distribution by the rejection rule
// (sample_rows.h): distributed as the target's (VerifyDraftedRow), not token for token the
// tokens without speculation, but a seed replays, alone or in any batch; the twin's q is the
// target's p, so nearly every proposal is accepted at any temperature.
TEST(DraftSpeculative, SampledRequestsReplayTheirSeedsAndTheTwinIsMostlyAccepted) {
  const EngineConfig plain = testing_util::stories_config();
  LlmEngine tokenizing(plain);
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    model::SamplingParams params;
    params.temperature = i % 2 == 0 ? 0.5f : 1.0f;
    params.top_p = i % 3 == 1 ? 0.9f : 1.0f;
    params.top_k = i == 6 ? 8 : 0;
    params.seed = 2000 + i;
    params.max_tokens = 48;
    if (i % 2 == 0) params.logprobs = 2;
    if (i == 5) params.n = 2;
    requests.push_back({tokenizing.tokenizer().encode(kPrompts[i]), params});
  }
  const EngineRun got = run(with_draft(plain), requests);
  expect_same_outputs(got, run(with_draft(plain), requests), "replayed");
  for (size_t i : {0, 3, 5}) {
    expect_same_outputs(EngineRun{{got.outputs[i]}, {}}, run(with_draft(plain), {requests[i]}),
                        "alone " + std::to_string(i));
  }
  EXPECT_GT(acceptance(got), kTwinAcceptance);
  // Penalties make p differ from the draft's q: still distributed as the target, still valid.
  requests[1].params.repetition_penalty = 1.3f;
  requests[2].params.presence_penalty = 0.5f;
  const EngineRun penalised = run(with_draft(plain), requests);
  expect_same_outputs(penalised, run(with_draft(plain), requests), "penalised, replayed");
  EXPECT_GT(penalised.stats.num_spec_accepted_tokens, 0);
}

// A stop string completed inside a verified step that also reaches max_tokens: the output, its
// text and its cumulative logprob end at the stop string, as without speculation. The twin
// accepts everything, so each step emits K + 1 tokens and some max_tokens below falls in the
// same step as the stop string.
TEST(DraftSpeculative, AStopStringInTheStepThatEndsByLengthEndsEverythingThere) {
  const EngineConfig plain = testing_util::stories_config();
  const Request base = story_requests(1).front();
  model::SamplingParams long_run = greedy(40);
  long_run.logprobs = 0;
  const Tokens out = run(plain, {{base.prompt, long_run}}).outputs[0].tokens();
  ASSERT_GE(out.size(), 30u);
  LlmEngine tokenizing(plain);
  std::vector<Request> requests;
  for (int end = 20; end < 26; ++end) {
    model::SamplingParams params = greedy(end + 2);
    params.stop = {tokenizing.tokenizer().decode(Tokens(out.begin() + end - 2, out.begin() + end))};
    requests.push_back({base.prompt, params});
  }
  const EngineRun baseline = run(plain, requests);
  expect_same_outputs(baseline, run(with_draft(plain), requests), "stop string and length");
}

// The draft's twin pools take their share of --kv-cache-memory and the swap space: the twin of
// stories260K doubles a block's bytes (2 x 5 layers x 4 KV heads x 8 x 16 tokens x 4 bytes =
// 20480 each), so the same memory holds half the blocks.
TEST(DraftSpeculative, TheTwinPoolsShareTheKvMemory) {
  EngineConfig plain = testing_util::stories_config();
  plain.num_kv_blocks = 0;  // from memory
  plain.kv_cache_memory_bytes = int64_t{20480} * 100;
  plain.swap_space_bytes = int64_t{20480} * 10;
  const LlmEngine alone(plain);
  EXPECT_EQ(alone.scheduler().block_manager().num_total_device_blocks(), 100);
  EXPECT_EQ(alone.scheduler().block_manager().num_total_cpu_blocks(), 10);
  const LlmEngine drafted(with_draft(plain));
  EXPECT_EQ(drafted.scheduler().block_manager().num_total_device_blocks(), 50);
  EXPECT_EQ(drafted.scheduler().block_manager().num_total_cpu_blocks(), 5);
}

class DraftSpeculativeSynthetic : public ::testing::Test {
 protected:
  // A random model with stories260K's vocabulary but another shape (its twin KV pool too).
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pagedserve_draft_synthetic_" + std::to_string(::getpid()));
    model::SyntheticModelSpec spec;
    spec.hidden_size = 32;
    spec.num_layers = 2;
    spec.num_heads = 2;
    spec.num_kv_heads = 1;
    spec.intermediate_size = 64;
    spec.vocab_size = 512;
    spec.max_position_embeddings = 1024;
    spec.seed = 11;
    model::write_synthetic_model(dir_ / "v512", spec);
    spec.vocab_size = 300;
    model::write_synthetic_model(dir_ / "v300", spec);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(DraftSpeculativeSynthetic, AnUnrelatedDraftChangesNothingButTheSpeed) {
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(40);
  const EngineRun baseline = run(plain, requests);
  const EngineRun got = run(with_draft(plain, 3, 0, (dir_ / "v512").string()), requests);
  expect_same_outputs(baseline, got, "random draft");
  EXPECT_GT(got.stats.num_spec_rows, 0);
  EXPECT_LT(acceptance(got), 0.5) << "a random draft is not the target";
}

// The twin quantized to Q4_0 proposes the target's tokens often but not always, so its rows
// have rejections. Greedy draft proposals are a function of the tokens alone when the draft's
// K/V are right, so planning draft rows past verifying steps (overlap) proposes and accepts what
// the steps planned one at a time do, up to the last rows (whose slots are capped as if the
// step before accepted everything). A draft reading K/V that a rejection left stale, or missing
// the last accepted proposal's, proposes otherwise.
TEST_F(DraftSpeculativeSynthetic, PlannedPastARejectionTheDraftProposesWhatItWouldAlone) {
  const std::filesystem::path q4 = dir_ / "stories260K-q4_0.gguf";
  model::quantize_gguf(twin_draft(), q4, *model::parse_quantization_plan("Q4_0"));
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(96);
  for (const Request& request : {requests.front(), requests.back()}) {
    const EngineRun baseline = run(plain, {request});
    const EngineRun sync = run(with_draft(plain, 4, 0, q4.string()), {request}, false);
    const EngineRun overlap = run(with_draft(plain, 4, 0, q4.string()), {request}, true);
    expect_same_outputs(baseline, sync, "q4 draft");
    expect_same_outputs(baseline, overlap, "q4 draft, overlap");
    const int64_t rejected =
        sync.stats.num_spec_proposed_tokens - sync.stats.num_spec_accepted_tokens;
    EXPECT_GT(rejected, 4) << "the quantized twin is meant to miss sometimes";
    EXPECT_GT(overlap.stats.num_spec_rows_planned_ahead, 5);
    EXPECT_NEAR(overlap.stats.num_spec_accepted_tokens, sync.stats.num_spec_accepted_tokens, 4);
  }
}

TEST_F(DraftSpeculativeSynthetic, RefusesSettingsItCannotServe) {
  auto error_of = [](const EngineConfig& config) -> std::string {
    try {
      LlmEngine engine(config);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const EngineConfig plain = testing_util::stories_config();
  EXPECT_NE(error_of(with_draft(plain, 4, 0, (dir_ / "v300").string())).find("vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of(with_draft(plain, 4, 0, "")).find("--draft-model"), std::string::npos);
  EXPECT_NE(error_of(with_draft(plain, 4, 0, (dir_ / "missing").string())).find("missing"),
            std::string::npos);
  EngineConfig stray = plain;
  stray.speculative.draft_model = twin_draft();  // without --speculative draft
  stray.speculative.method = SpeculativeMethod::kNgram;
  EXPECT_NE(error_of(stray), "");
}

TEST(DraftSpeculative, ActorEngineMatchesAndCountsProposals) {
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(48);
  const EngineRun baseline = run(plain, requests);
  const EngineStats stats = expect_actor_engine_outputs(with_draft(plain), requests, baseline);
  EXPECT_GT(stats.num_spec_accepted_tokens, stats.num_spec_proposed_tokens * 9 / 10);
}

}  // namespace
}  // namespace pagedserve::actors
