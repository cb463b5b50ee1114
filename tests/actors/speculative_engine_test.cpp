// Speculative decoding (n-gram proposals) end to end: outputs identical to the same requests
// without speculation (greedy, and seeded sampling, which verification draws exactly as a
// lone step would), alone and in batches, with overlap on, under preemption by swap and by
// recompute, with prefix caching, with stops and limits; the KV invariants after every step
// and every block free at the end; the sampled distribution at a verified position against the
// model's own softmax (chi-square); the actor engine's counters.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/llm_engine.h"
#include "actors/ngram_proposer.h"
#include "model/synthetic_model.h"
#include "tests/actors/engine_test_util.h"
#include "tests/actors/speculative_test_util.h"

namespace pagedserve::actors {
namespace {

using namespace spec_testing;
using testing_util::greedy;

// min_accepted 0 (the tests of the mechanism): every sequence proposes whenever it can.
EngineConfig with_speculation(EngineConfig config, int max_batch = 0, int k = 4,
                              double min_accepted = 0.0) {
  config.speculative.method = SpeculativeMethod::kNgram;
  config.speculative.num_speculative_tokens = k;
  config.speculative.max_batch_seqs = max_batch;
  config.speculative.min_accepted_per_seq = min_accepted;
  return config;
}

TEST(SpeculativeEngine, GreedyIsIdenticalAloneInBatchesAndWithOverlap) {
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(96);
  const EngineRun baseline = run(plain, requests);
  const EngineRun alone = run(with_speculation(plain), {requests.back()});
  expect_same_outputs(EngineRun{{baseline.outputs.back()}, {}}, alone, "grounded prompt alone");
  EXPECT_GT(alone.stats.num_spec_accepted_tokens, 40) << "the grounded prompt is repeated";
  EXPECT_LT(alone.stats.num_steps, baseline.stats.num_steps);

  const EngineRun batched = run(with_speculation(plain), requests);
  expect_same_outputs(baseline, batched, "batch, no limit");
  EXPECT_GT(batched.stats.num_spec_rows, 0);
  EXPECT_GT(batched.stats.num_spec_accepted_tokens, 0);
  EXPECT_LE(batched.stats.num_spec_accepted_tokens, batched.stats.num_spec_proposed_tokens);
  // With overlap, and the policy switching speculation off while more than 3 sequences run.
  expect_same_outputs(baseline, run(with_speculation(plain), requests, /*overlap=*/true),
                      "batch, overlap");
  const EngineRun policy =
      run(with_speculation(plain, /*max_batch=*/3), requests, /*overlap=*/true);
  expect_same_outputs(baseline, policy, "batch, overlap, max batch 3");
  EXPECT_GT(policy.stats.num_steps_planned_ahead, 0) << "overlap resumes above the threshold";
  EXPECT_LT(policy.stats.num_spec_rows, batched.stats.num_spec_rows);
  // K = 1 and K = 8.
  expect_same_outputs(baseline, run(with_speculation(plain, 0, 1), requests), "K = 1");
  expect_same_outputs(baseline, run(with_speculation(plain, 0, 8), requests), "K = 8");
}

// Overlap scheduling past verifying steps: with a step in flight, a sequence's next row is
// planned as if that step accepts all its proposals, with proposal slots that the executor
// fills by the n-gram lookup on the tokens it drew; it moves the row back over rejected ones.
// Alone, with overlap on, nearly every step is planned ahead, rows verify proposals in them,
// and the output is the one without speculation, in as few steps as without overlap.
TEST(SpeculativeEngine, RowsPlannedAheadVerifyProposalsTheExecutorLooksUp) {
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(96);
  const std::vector<Request> grounded = {requests.back()};
  const EngineRun baseline = run(plain, grounded, /*overlap=*/true);
  const EngineRun got = run(with_speculation(plain), grounded, /*overlap=*/true);
  expect_same_outputs(baseline, got, "grounded prompt alone, overlap");
  EXPECT_GT(got.stats.num_steps_planned_ahead, got.stats.num_steps * 3 / 4);
  EXPECT_GT(got.stats.num_spec_rows_planned_ahead, 10);
  EXPECT_GT(got.stats.num_spec_accepted_tokens, 40);
  const EngineRun sync = run(with_speculation(plain), grounded, /*overlap=*/false);
  EXPECT_EQ(sync.stats.num_steps_planned_ahead, 0);
  EXPECT_LE(got.stats.num_steps, sync.stats.num_steps + 2);
  EXPECT_LT(got.stats.num_steps, baseline.stats.num_steps * 3 / 4);
  // In a batch, sampled and penalised too (penalty histories move back with the rows).
  std::vector<Request> mixed = requests;
  for (size_t i = 0; i < 3; ++i) {
    Request sampled = requests[i + 5];
    sampled.params.temperature = 0.8f;
    sampled.params.seed = 77 + i;
    sampled.params.repetition_penalty = 1.1f;
    sampled.params.presence_penalty = i == 1 ? 0.3f : 0.0f;
    mixed.push_back(sampled);
  }
  const EngineRun mixed_got = run(with_speculation(plain), mixed, /*overlap=*/true);
  expect_same_outputs(run(plain, mixed, /*overlap=*/true), mixed_got, "batch, overlap");
  EXPECT_GT(mixed_got.stats.num_spec_rows_planned_ahead, 0);
}

TEST(SpeculativeEngine, GreedyIsIdenticalUnderPreemptionBySwapAndRecompute) {
  EngineConfig small = testing_util::stories_config();
  small.block_size = 4;
  small.num_kv_blocks = 72;
  small.max_model_len = 240;
  const std::vector<Request> requests = story_requests(80, 60);
  EngineConfig roomy = small;
  roomy.num_kv_blocks = 1024;
  const EngineRun baseline = run(roomy, requests);
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    EngineConfig config = with_speculation(small);
    config.preemption_mode = mode;
    if (mode == PreemptionMode::kSwap) config.swap_space_bytes = 4 << 20;
    for (bool overlap : {false, true}) {
      const std::string what =
          std::string(preemption_mode_name(mode)) + (overlap ? ", overlap" : "");
      const EngineRun got = run(config, requests, overlap);
      expect_same_outputs(baseline, got, what);
      const int64_t preemptions = mode == PreemptionMode::kSwap
                                      ? got.stats.num_preemptions_swap
                                      : got.stats.num_preemptions_recompute;
      EXPECT_GT(preemptions, 0) << what << ": the pool was meant to be too small";
      EXPECT_GT(got.stats.num_spec_accepted_tokens, 0) << what;
    }
  }
}

TEST(SpeculativeEngine, PrefixCacheServesOnlyAcceptedTokens) {
  const EngineConfig plain = testing_util::stories_config();
  const Tokens prompt = grounded_prompt(80);
  // The same prompt again (its blocks cached, generated ones too), then the prompt extended by
  // a part of its own continuation: both read blocks that speculative steps filled.
  EngineRun first_pass = run(plain, {{prompt, greedy(64)}});
  Tokens extended = prompt;
  const Tokens& continuation = first_pass.outputs[0].tokens();
  extended.insert(extended.end(), continuation.begin(), continuation.begin() + 37);
  const std::vector<Request> requests = {{prompt, greedy(64)}, {extended, greedy(40)}};
  // Sequentially, in one engine: the second and third requests hit what the first cached.
  auto sequential = [&](const EngineConfig& config) {
    LlmEngine engine(config);
    std::vector<std::vector<Tokens>> out;
    for (int round = 0; round < 2; ++round) {
      std::vector<Tokens> tokens;
      for (const Request& r : requests) {
        engine.add_request(r.prompt, r.params);
        const auto done = testing_util::run_to_completion(engine);
        tokens.push_back(done.begin()->second.tokens());
        EXPECT_EQ(engine.scheduler().block_manager().check_invariants(), "");
      }
      out.push_back(tokens);
    }
    testing_util::expect_all_blocks_free(engine);
    EXPECT_GT(engine.scheduler().block_manager().prefix_cache_hits_tokens(), 0);
    return out;
  };
  const auto expected = sequential(plain);
  const auto got = sequential(with_speculation(plain));
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got[0][0], got[1][0]);
}

TEST(SpeculativeEngine, SeededSamplingPenaltiesAndLogprobsAreIdentical) {
  const EngineConfig plain = testing_util::stories_config();
  const Tokens grounded = grounded_prompt(60);
  LlmEngine tokenizing(plain);
  std::vector<Request> requests;
  for (int i = 0; i < 12; ++i) {
    model::SamplingParams params;
    params.temperature = i % 3 == 0 ? 0.6f : 1.0f;
    params.top_p = i % 4 == 1 ? 0.9f : 1.0f;
    params.top_k = i % 4 == 2 ? 20 : 0;
    params.seed = 1000 + i;
    params.max_tokens = 48;
    if (i % 5 == 3) params.presence_penalty = 0.4f;
    if (i % 5 == 4) params.repetition_penalty = 1.2f;
    if (i % 2 == 0) params.logprobs = 3;
    if (i == 7) params.n = 2;  // children speculate on their own streams
    const Tokens prompt =
        i % 2 == 0 ? grounded : tokenizing.tokenizer().encode(kPrompts[i % kPrompts.size()]);
    requests.push_back({prompt, params});
  }
  const EngineRun baseline = run(plain, requests);
  const EngineRun got = run(with_speculation(plain), requests);
  expect_same_outputs(baseline, got, "sampled");
  EXPECT_GT(got.stats.num_spec_accepted_tokens, 0);
}

// The acceptance policy (SpeculativeConfig::min_accepted_per_seq) holds back sequences whose
// proposals are rarely accepted: fewer rows verified, a larger share of proposals accepted,
// steps planned ahead again while every sequence is held, and no output changes (greedy, and
// seeded sampling, whose verified draws are a lone step's).
TEST(SpeculativeEngine, TheAcceptancePolicyHoldsBackMissesAndChangesNoOutput) {
  const EngineConfig plain = testing_util::stories_config();
  std::vector<Request> requests = story_requests(96);
  for (size_t i = 0; i < 4; ++i) {  // the same prompts sampled, seeded
    Request sampled = requests[i];
    sampled.params.temperature = 1.0f;
    sampled.params.seed = 300 + i;
    requests.push_back(sampled);
  }
  const EngineRun baseline = run(plain, requests, /*overlap=*/true);
  const EngineRun eager = run(with_speculation(plain), requests, /*overlap=*/true);
  const EngineRun held = run(with_speculation(plain, 0, 4, 0.5), requests, /*overlap=*/true);
  expect_same_outputs(baseline, held, "policy on");
  expect_same_outputs(baseline, eager, "policy off");
  EXPECT_LT(held.stats.num_spec_rows, eager.stats.num_spec_rows / 2);
  auto accepted_share = [](const EngineRun& r) {
    return static_cast<double>(r.stats.num_spec_accepted_tokens) /
           static_cast<double>(std::max<int64_t>(r.stats.num_spec_proposed_tokens, 1));
  };
  EXPECT_GT(accepted_share(held), accepted_share(eager));
  // n-gram proposals no longer stop overlap: either way nearly every step is planned ahead.
  EXPECT_GT(eager.stats.num_steps_planned_ahead, eager.stats.num_steps * 3 / 4);
  EXPECT_GT(held.stats.num_steps_planned_ahead, held.stats.num_steps * 3 / 4);
  // Alone (the bar is lowest), the grounded prompt still speculates and saves steps.
  const EngineRun alone_baseline = run(plain, {requests[kPrompts.size()]});
  const EngineRun alone = run(with_speculation(plain, 0, 4, 0.5), {requests[kPrompts.size()]});
  expect_same_outputs(alone_baseline, alone, "grounded prompt alone, policy on");
  EXPECT_GT(alone.stats.num_spec_accepted_tokens, 10);
  EXPECT_LT(alone.stats.num_steps, alone_baseline.stats.num_steps);
}

// The adaptive length (SpeculativeConfig::max_speculative_tokens): a sequence whose proposals
// are all accepted proposes 2 more next time, so on the grounded prompt rows grow past K; the
// outputs stay the same, and it saves steps over the fixed K.
TEST(SpeculativeEngine, TheAdaptiveLengthGrowsPastKAndChangesNoOutput) {
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(96);
  EngineConfig adaptive = with_speculation(plain, 0, /*k=*/2);
  adaptive.speculative.max_speculative_tokens = 12;
  expect_same_outputs(run(plain, requests), run(adaptive, requests), "batch, adaptive");
  expect_same_outputs(run(plain, requests, /*overlap=*/true),
                      run(adaptive, requests, /*overlap=*/true), "batch, overlap, adaptive");

  const std::vector<Request> grounded = {requests.back()};
  const EngineRun fixed_run = run(with_speculation(plain, 0, 2), grounded);
  const EngineRun adaptive_run = run(adaptive, grounded);
  expect_same_outputs(fixed_run, adaptive_run, "grounded prompt alone");
  auto per_row = [](const EngineRun& r) {
    return static_cast<double>(r.stats.num_spec_proposed_tokens) /
           static_cast<double>(std::max<int64_t>(r.stats.num_spec_rows, 1));
  };
  EXPECT_LE(per_row(fixed_run), 2.0);
  EXPECT_GT(per_row(adaptive_run), 2.5) << "rows grew past K on accepted proposals";
  EXPECT_LE(per_row(adaptive_run), 12.0);
  EXPECT_LT(adaptive_run.stats.num_steps, fixed_run.stats.num_steps);
}

TEST(SpeculativeEngine, LogprobsComeOnePerTokenWithTheSameValues) {
  const EngineConfig plain = testing_util::stories_config();
  model::SamplingParams params = greedy(40);
  params.logprobs = 2;
  const Request request{grounded_prompt(60), params};
  auto logprobs_of = [&](const EngineConfig& config) {
    LlmEngine engine(config);
    engine.add_request(request.prompt, request.params);
    std::vector<model::SampleLogprobs> all;
    Tokens tokens;
    while (engine.has_unfinished_requests()) {
      for (const RequestOutput& out : engine.step()) {
        for (const SequenceOutput& d : out.deltas) {
          EXPECT_EQ(d.logprobs.size(), d.new_token_ids.size());
          all.insert(all.end(), d.logprobs.begin(), d.logprobs.end());
          tokens.insert(tokens.end(), d.new_token_ids.begin(), d.new_token_ids.end());
        }
      }
    }
    return std::make_pair(tokens, all);
  };
  const auto [expected_tokens, expected] = logprobs_of(plain);
  const auto [tokens, got] = logprobs_of(with_speculation(plain));
  EXPECT_EQ(tokens, expected_tokens);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sampled.token_id, expected[i].sampled.token_id);
    EXPECT_NEAR(got[i].sampled.logprob, expected[i].sampled.logprob, 1e-4);
    ASSERT_EQ(got[i].top.size(), expected[i].top.size());
  }
}

TEST(SpeculativeEngine, StopsAndLimitsEndAtTheSameToken) {
  const EngineConfig plain = testing_util::stories_config();
  const Tokens grounded = grounded_prompt(80);
  // The baseline's output tells which tokens and texts occur, to stop on them.
  const EngineRun free_run = run(plain, {{grounded, greedy(60)}});
  const Tokens& out = free_run.outputs[0].tokens();
  ASSERT_GE(out.size(), 30u);
  std::vector<Request> requests;
  for (int max_tokens : {1, 2, 3, 5, 7, 13}) requests.push_back({grounded, greedy(max_tokens)});
  model::SamplingParams stop_id = greedy(60);
  stop_id.stop_token_ids = {out[20]};
  requests.push_back({grounded, stop_id});
  model::SamplingParams stop_text = greedy(60);
  LlmEngine tokenizing(plain);
  const std::string text =
      tokenizing.tokenizer().decode(Tokens(out.begin() + 25, out.begin() + 27));
  stop_text.stop = {text};
  requests.push_back({grounded, stop_text});
  model::SamplingParams min_tokens = greedy(60);
  min_tokens.min_tokens = 10;
  min_tokens.stop_token_ids = {out[3]};
  requests.push_back({grounded, min_tokens});
  EngineConfig short_context = plain;
  short_context.max_model_len = static_cast<int>(grounded.size()) + 9;
  const EngineRun baseline = run(plain, requests);
  const EngineRun got = run(with_speculation(plain), requests);
  expect_same_outputs(baseline, got, "stops");
  EXPECT_GT(got.stats.num_spec_accepted_tokens, 0);
  // max_model_len: the sequence ends exactly at the limit.
  const std::vector<Request> long_one = {{grounded, greedy(60)}};
  const EngineRun limited = run(with_speculation(short_context), long_one);
  expect_same_outputs(run(short_context, long_one), limited, "max_model_len");
  EXPECT_EQ(limited.outputs[0].tokens().size(), 9u);
}

TEST(SpeculativeEngine, SyntheticModelGreedyIsIdentical) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("pagedserve_spec_synthetic_" + std::to_string(::getpid()));
  model::SyntheticModelSpec spec;
  spec.hidden_size = 64;
  spec.num_layers = 2;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.intermediate_size = 128;
  spec.vocab_size = 300;
  spec.max_position_embeddings = 512;
  spec.seed = 3;
  model::write_synthetic_model(dir, spec);
  EngineConfig config;
  config.model_dir = dir;
  config.num_kv_blocks = 256;
  config.block_size = 8;
  std::vector<Request> requests;
  for (int r = 0; r < 6; ++r) {
    Tokens prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(1 + (i * (r + 3)) % (7 + r));  // repeats
    model::SamplingParams params = greedy(60);
    params.ignore_eos = true;
    requests.push_back({prompt, params});
  }
  const EngineRun baseline = run(config, requests);
  const EngineRun got = run(with_speculation(config), requests);
  expect_same_outputs(baseline, got, "synthetic");
  EXPECT_GT(got.stats.num_spec_rows, 0);
  std::filesystem::remove_all(dir);
}

// Chi-square on the token drawn at output position 1, the first verified one: over many
// seeds, its frequencies (among the samples whose position 1 had a proposal) against the
// model's own distribution there (temperature 1, top-k 6: the softmax of the 6 highest raw
// logprobs), conditioned on each sample's token 0.
TEST(SpeculativeEngine, SampledDistributionAtAVerifiedPositionIsTheTargets) {
  const EngineConfig plain = testing_util::stories_config();
  const EngineConfig config = with_speculation(plain);
  const Tokens prompt = grounded_prompt(40);
  constexpr int kSamples = 2000;
  constexpr int kTopK = 6;
  model::SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = kTopK;
  params.max_tokens = 3;  // position 1 is verified with one proposal (none at the last)
  params.ignore_eos = true;
  std::vector<Request> requests;
  for (int s = 0; s < kSamples; ++s) {
    params.seed = 77 + s;
    requests.push_back({prompt, params});
  }
  EngineConfig roomy = config;
  roomy.num_kv_blocks = 4096;
  const EngineRun got = run(roomy, requests);
  EXPECT_GT(got.stats.num_spec_rows, kSamples / 4) << "position 1 was meant to be verified";

  // p(t1 | t0) for every t0 drawn: the raw top logprobs after prompt + t0.
  std::map<int32_t, std::vector<model::TokenLogprob>> top_after;
  std::vector<std::pair<int32_t, int32_t>> drawn;
  for (const testing_util::Finished& f : got.outputs) {
    ASSERT_EQ(f.tokens().size(), 3u);
    drawn.emplace_back(f.tokens()[0], f.tokens()[1]);
    top_after[f.tokens()[0]];
  }
  for (auto& [t0, top] : top_after) {
    LlmEngine engine(plain);
    Tokens context = prompt;
    context.push_back(t0);
    model::SamplingParams one = greedy(1);
    one.logprobs = 20;
    engine.add_request(context, one);
    while (engine.has_unfinished_requests()) {
      for (const RequestOutput& out : engine.step()) {
        for (const SequenceOutput& d : out.deltas) {
          if (!d.logprobs.empty()) top = d.logprobs[0].top;
        }
      }
    }
    ASSERT_GE(top.size(), static_cast<size_t>(kTopK));
    top.resize(kTopK);
  }
  std::map<int32_t, double> expected;
  std::map<int32_t, double> observed;
  std::map<int32_t, double> always_accepted;  // what a verifier that always accepts would give
  const NgramProposer proposer(config.speculative.ngram_min, config.speculative.ngram_max);
  int num_verified = 0;
  for (const auto& [t0, t1] : drawn) {
    // Only the samples whose position 1 had a proposal to verify.
    Tokens context = prompt;
    context.push_back(t0);
    const Tokens proposal = proposer.propose(context, 1);
    if (proposal.empty()) continue;
    ++num_verified;
    const std::vector<model::TokenLogprob>& top = top_after[t0];
    double norm = 0;
    for (const model::TokenLogprob& c : top) norm += std::exp(static_cast<double>(c.logprob));
    for (const model::TokenLogprob& c : top) {
      expected[c.token_id] += std::exp(static_cast<double>(c.logprob)) / norm;
    }
    observed[t1] += 1;
    always_accepted[proposal[0]] += 1;
  }
  EXPECT_GT(num_verified, kSamples / 4);
  // Categories with an expected count of at least 5; the rest pooled.
  auto chi_square = [&](const std::map<int32_t, double>& counts, int& df) {
    double chi = 0, rest_expected = 0, rest_observed = 0;
    df = -1;
    std::set<int32_t> tokens;
    for (const auto& [t, e] : expected) tokens.insert(t);
    for (const auto& [t, c] : counts) tokens.insert(t);
    for (int32_t t : tokens) {
      const double e = expected.count(t) ? expected.at(t) : 0.0;
      const double o = counts.count(t) ? counts.at(t) : 0.0;
      if (e < 5) {
        rest_expected += e;
        rest_observed += o;
        continue;
      }
      chi += (o - e) * (o - e) / e;
      ++df;
    }
    if (rest_expected > 0) {
      chi += (rest_observed - rest_expected) * (rest_observed - rest_expected) / rest_expected;
      ++df;
    } else if (rest_observed > 0) {
      chi += 1e9;  // drawn where the model puts no mass
    }
    return chi;
  };
  int df = 0;
  const double chi = chi_square(observed, df);
  ASSERT_GE(df, 2);
  // The 0.1% critical value (Wilson-Hilferty): a correct sampler fails this 1 run in 1000, and
  // the seeds are fixed, so the test is deterministic.
  const double z = 3.09;
  const double a = 2.0 / (9.0 * df);
  const double critical = df * std::pow(1 - a + z * std::sqrt(a), 3);
  EXPECT_LT(chi, critical) << "df " << df;
  int df_bug = 0;
  EXPECT_GT(chi_square(always_accepted, df_bug), critical)
      << "the test must tell an always-accepting verifier apart";
}

TEST(SpeculativeEngine, ActorEngineMatchesAndCountsProposals) {
  const EngineConfig plain = testing_util::stories_config();
  const std::vector<Request> requests = story_requests(64);
  const EngineRun baseline = run(plain, requests);
  const EngineStats stats =
      expect_actor_engine_outputs(with_speculation(plain), requests, baseline);
  EXPECT_GT(stats.num_spec_rows, 0);
  EXPECT_GT(stats.num_spec_accepted_tokens, 0);
  EXPECT_LE(stats.num_spec_accepted_tokens, stats.num_spec_proposed_tokens);
}

TEST(SpeculativeEngine, RefusesSettingsItCannotServe) {
  EngineConfig config = with_speculation(testing_util::stories_config());
  config.kv_allocator = cache::KvAllocatorKind::kReserveMax;
  EXPECT_THROW(LlmEngine{config}, std::invalid_argument);
  config = with_speculation(testing_util::stories_config());
  config.speculative.ngram_max = 0;
  EXPECT_THROW(LlmEngine{config}, std::invalid_argument);
  config = with_speculation(testing_util::stories_config(), 0, /*k=*/4);
  config.speculative.max_speculative_tokens = 3;  // below K
  EXPECT_THROW(LlmEngine{config}, std::invalid_argument);
  config.speculative.max_speculative_tokens = 65;
  EXPECT_THROW(LlmEngine{config}, std::invalid_argument);
}

}  // namespace
}  // namespace pagedserve::actors
