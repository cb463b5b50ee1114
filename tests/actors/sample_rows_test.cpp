// sample_step_rows: a step's rows sampled on a two-thread pool (every split forced) give each
// sequence what sampling its row alone gives (penalties, banned tokens, seeds, logprobs), map
// rows to the sequences that sample, and refuse a sampling sequence without params. A drawn
// token's logprob is computed only where best_of ranking or requested logprobs need it.
#include "actors/sample_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/sampler.h"

namespace pagedserve::actors {
namespace {

constexpr int kVocab = 3000;

ScheduledSequence sampling_seq(uint64_t id, std::shared_ptr<const model::SamplingParams> p,
                               std::vector<uint64_t> seeds) {
  ScheduledSequence seq;
  seq.seq_id = id;
  seq.sample = true;
  seq.sampling = std::move(p);
  seq.sample_seeds = std::move(seeds);
  seq.sample_step = id * 3;
  return seq;
}

TEST(SampleStepRows, RowsOnThePoolMatchEachRowSampledAlone) {
  auto greedy = std::make_shared<model::SamplingParams>();
  greedy->temperature = 0.0f;
  auto t1 = std::make_shared<model::SamplingParams>();
  auto best_of = std::make_shared<model::SamplingParams>();  // ranks its 3 samples by logprob
  best_of->temperature = 0.7f;
  best_of->best_of = 3;
  auto nucleus = std::make_shared<model::SamplingParams>();
  nucleus->top_p = 0.8f;
  nucleus->logprobs = 3;
  auto penalised = std::make_shared<model::SamplingParams>();
  penalised->repetition_penalty = 1.5f;
  penalised->frequency_penalty = 0.5f;

  std::vector<ScheduledSequence> seqs;
  seqs.push_back(sampling_seq(0, greedy, {1}));
  seqs.push_back(sampling_seq(1, best_of, {11, 12, 13}));  // a prompt forking into 3 samples
  ScheduledSequence chunk;  // a prompt chunk that is not the last: no row, no output
  chunk.seq_id = 2;
  seqs.push_back(chunk);
  seqs.push_back(sampling_seq(3, nucleus, {7}));
  seqs.push_back(sampling_seq(4, penalised, {9}));
  seqs.back().penalty_prompt_ids = {5, 6, 7};
  seqs.back().penalty_output_ids = {8, 8, 9};
  seqs.back().banned_token_ids = {0, 1, 2};
  seqs.push_back(sampling_seq(5, t1, {21}));
  seqs.back().num_top_logprobs = 4;

  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const size_t rows = 5;
  std::vector<float> logits(rows * kVocab);
  for (float& l : logits) l = normal(rng);
  // Make the banned and penalised tokens the likeliest, so a missed mask shows.
  for (int id : {0, 1, 2, 5, 8}) logits[3 * kVocab + id] = 30.0f;

  kernels::ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  std::vector<SequenceStepOutput> out(seqs.size());
  sample_step_rows(seqs, logits, kVocab, &pool, out);

  EXPECT_TRUE(out[2].samples.empty());
  size_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ScheduledSequence& seq = seqs[i];
    if (!seq.sample) continue;
    SCOPED_TRACE("sequence " + std::to_string(seq.seq_id));
    const std::span<const float> raw(logits.data() + row * kVocab, kVocab);
    std::vector<float> masked(raw.begin(), raw.end());
    model::apply_penalties(masked, *seq.sampling, seq.penalty_prompt_ids, seq.penalty_output_ids);
    for (int32_t id : seq.banned_token_ids) masked[id] = -std::numeric_limits<float>::infinity();
    ASSERT_EQ(out[i].samples.size(), seq.sample_seeds.size());
    for (size_t s = 0; s < seq.sample_seeds.size(); ++s) {
      const int32_t token =
          model::sample_token(masked, *seq.sampling, seq.sample_seeds[s], seq.sample_step);
      EXPECT_EQ(out[i].samples[s].token_id, token);
      // Only best_of ranking and requested logprobs pay for the drawn token's logprob.
      if (seq.seq_id == 1 || seq.seq_id == 3) {
        EXPECT_NEAR(out[i].samples[s].logprob, model::token_logprob(masked, token), 1e-5);
      } else {
        EXPECT_TRUE(std::isnan(out[i].samples[s].logprob)) << out[i].samples[s].logprob;
      }
    }
    for (int32_t banned : seq.banned_token_ids) EXPECT_NE(out[i].samples[0].token_id, banned);
    EXPECT_EQ(out[i].top_logprobs, model::top_logprobs(masked, seq.num_top_logprobs));
    if (seq.sampling->logprobs) {
      ASSERT_EQ(out[i].reported_logprobs.size(), 1u);
      EXPECT_EQ(out[i].reported_logprobs[0].top.size(), 3u);
    }
    ++row;
  }
  EXPECT_EQ(row, rows);
}

TEST(SampleStepRows, ASamplingSequenceWithoutParamsIsRefusedByName) {
  std::vector<ScheduledSequence> seqs(1);
  seqs[0].seq_id = 42;
  seqs[0].sample = true;
  std::vector<float> logits(kVocab, 0.0f);
  std::vector<SequenceStepOutput> out(1);
  try {
    sample_step_rows(seqs, logits, kVocab, nullptr, out);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 42"), std::string::npos) << e.what();
  }
}

// Pearson's chi-square of counts against probabilities (every category expected >= 5 here).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int total) {
  double chi = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    const double expected = total * probs[t];
    chi += (counts[t] - expected) * (counts[t] - expected) / expected;
  }
  return chi;
}

std::vector<double> softmax(const std::vector<float>& row) {
  std::vector<double> p(row.size());
  double total = 0;
  for (size_t i = 0; i < row.size(); ++i) total += p[i] = std::exp(static_cast<double>(row[i]));
  for (double& x : p) x /= total;
  return p;
}

// Proposals drawn from a draft's q (unlike the target's p) and verified by the rejection rule:
// the emitted token at each position is distributed as the target's p there, which a verifier
// that accepted every proposal (emitting q's draws) is shown to fail.
TEST(VerifyDraftedRow, EmittedTokensAreDistributedAsTheTarget) {
  constexpr size_t kSmallVocab = 6;
  constexpr int kRows = 3;  // K = 2 proposals, and the bonus row
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> target(kRows, std::vector<float>(kSmallVocab));
  std::vector<std::vector<float>> draft(kRows - 1, std::vector<float>(kSmallVocab));
  for (auto& row : target)
    for (float& x : row) x = normal(rng);
  for (auto& row : draft)
    for (float& x : row) x = normal(rng);
  std::vector<float> logits;
  for (const auto& row : target) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<float> draft_probs;
  std::vector<std::discrete_distribution<int32_t>> draw_from_q;
  for (const auto& row : draft) {
    const std::vector<double> q = softmax(row);
    draft_probs.insert(draft_probs.end(), q.begin(), q.end());
    draw_from_q.emplace_back(q.begin(), q.end());
  }
  auto params = std::make_shared<model::SamplingParams>();  // temperature 1, no filters
  params->logprobs = 1;
  constexpr int kDraws = 20000;
  std::vector<int> first(kSmallVocab), second(kSmallVocab), proposed_first(kSmallVocab);
  int num_second = 0, num_accepted = 0;
  for (int s = 0; s < kDraws; ++s) {
    ScheduledSequence seq = sampling_seq(0, params, {static_cast<uint64_t>(s)});
    seq.num_proposed_tokens = 2;
    seq.new_token_ids = {3, draw_from_q[0](rng), draw_from_q[1](rng)};
    seq.draft_probs = draft_probs;
    const SequenceStepOutput out = verify_row(seq, logits);
    ASSERT_GE(out.samples.size(), 1u);
    ASSERT_LE(out.samples.size(), 3u);
    ASSERT_EQ(out.reported_logprobs.size(), out.samples.size());
    for (size_t j = 0; j + 1 < out.samples.size(); ++j) {
      EXPECT_EQ(out.samples[j].token_id, seq.new_token_ids[j + 1]) << "accepted = proposed";
    }
    ++first[static_cast<size_t>(out.samples[0].token_id)];
    ++proposed_first[static_cast<size_t>(seq.new_token_ids[1])];
    num_accepted += static_cast<int>(out.samples.size()) - 1;
    if (out.samples.size() >= 2) {
      ++second[static_cast<size_t>(out.samples[1].token_id)];
      ++num_second;
    }
    EXPECT_EQ(verify_row(seq, logits).samples, out.samples) << "a seed replays";
  }
  // The 0.1% critical value of chi-square with 5 degrees of freedom.
  constexpr double kCritical = 20.52;
  EXPECT_LT(chi_square(first, softmax(target[0]), kDraws), kCritical);
  EXPECT_LT(chi_square(second, softmax(target[1]), num_second), kCritical);
  EXPECT_GT(chi_square(proposed_first, softmax(target[0]), kDraws), 10 * kCritical)
      << "accepting every proposal would emit q, which the test must tell apart";
  EXPECT_GT(num_accepted, kDraws / 4);
  EXPECT_GT(num_second, 1000);
}

}  // namespace
}  // namespace pagedserve::actors
