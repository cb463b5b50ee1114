// Sampling cost per row (one sequence, one step) for a 32k and a 128k vocabulary, on three row
// shapes (kShapes: flat, a trained model's peaked row, and the random benchmark model's), at the
// settings clients use: BM_SamplerTokens draws the token alone (a default request),
// BM_Sampler its logprob too (best_of, beam search, logprobs). BM_FullSort is the baseline: the
// sorted definition as the sampler implemented it before (a partial sort of the whole row), run in
// the same process; the ratio of the two is the gain. Compare the per-row time with a batch-32
// decode step's (`pagedserve bench throughput --batch 32`, decode_step_ms / 32 per row per thread).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "model/sampler.h"

namespace {

using pagedserve::model::SamplingParams;

// Row shapes: 0 flat, 1 peaked, 2 the random benchmark model's (`make-model`: logits of
// standard deviation ~1, a spread of ~10 nats; its mass sits in the top ~16% of the row).
const char* const kShapes[] = {"flat ", "peaked ", "sd1 "};

std::vector<float> make_row(int vocab, int shape) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const bool peaked = shape == 1;
  const float sigma = shape == 2 ? 1.0f : 0.4f;
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) v = peaked ? 2.0f * normal(rng) - 10.0f : sigma * normal(rng);
  if (peaked) {
    for (int i = 0; i < 6; ++i) x[std::uniform_int_distribution<int>(0, vocab - 1)(rng)] = 8.0f - i;
  }
  return x;
}

SamplingParams params_for(int which) {
  SamplingParams p;
  switch (which) {
    case 0:  // greedy
      p.temperature = 0.0f;
      break;
    case 1:  // OpenAI's default
      break;
    case 2:
      p.top_p = 0.9f;
      break;
    case 3:
      p.top_k = 40;
      break;
    case 4:
      p.min_p = 0.05f;
      break;
    case 5:
      p.temperature = 0.7f;
      p.top_p = 0.95f;
      p.top_k = 50;
      break;
  }
  return p;
}

const char* const kSettings[] = {"greedy",     "t1",           "t1_top_p0.9",
                                 "t1_top_k40", "t1_min_p0.05", "t0.7_p0.95_k50"};

// The old implementation: partial sort of every (scaled logit, id), double exps, walk.
int32_t full_sort_sample(const std::vector<float>& logits, const SamplingParams& p, double u) {
  const int vocab = static_cast<int>(logits.size());
  if (p.is_greedy())
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<std::pair<float, int32_t>> c(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) c[i] = {logits[i] / p.temperature, i};
  const size_t keep = p.top_k > 0 && p.top_k < vocab ? static_cast<size_t>(p.top_k) : c.size();
  std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(keep), c.end(),
                    [](const auto& a, const auto& b) {
                      return a.first > b.first || (a.first == b.first && a.second < b.second);
                    });
  c.resize(keep);
  std::vector<double> probs(c.size());
  double total = 0.0;
  for (size_t i = 0; i < c.size(); ++i)
    total += probs[i] = std::exp(double(c[i].first) - c[0].first);
  for (double& q : probs) q /= total;
  size_t n = probs.size();
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    for (n = 0; n < probs.size();) {
      cum += probs[n++];
      if (cum >= p.top_p) break;
    }
  }
  if (p.min_p > 0.0f) {
    size_t m = 0;
    while (m < n && probs[m] >= p.min_p * probs[0]) ++m;
    n = std::max<size_t>(m, 1);
  }
  const double target = u * std::accumulate(probs.begin(), probs.begin() + n, 0.0);
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += probs[i];
    if (target < cum) return c[i].second;
  }
  return c[n - 1].second;
}

// Args: vocab, row shape (kShapes), setting index.
void BM_Sampler(benchmark::State& state) {
  const std::vector<float> row =
      make_row(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const SamplingParams p = params_for(static_cast<int>(state.range(2)));
  uint64_t step = 0;
  for (auto _ : state) {
    // What the executor calls per row of a request that ranks by, or reports, logprobs.
    benchmark::DoNotOptimize(pagedserve::model::sample_token_logprob(row, p, 7, step++));
  }
  state.SetLabel(std::string(kShapes[state.range(1)]) + kSettings[state.range(2)]);
}

// What the executor calls per row for a request that needs no drawn logprob (no best_of
// ranking, beam search or logprobs: a client's default request): the token alone.
void BM_SamplerTokens(benchmark::State& state) {
  const std::vector<float> row =
      make_row(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const SamplingParams p = params_for(static_cast<int>(state.range(2)));
  const uint64_t seed = 7;
  uint64_t step = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(pagedserve::model::sample_tokens(row, p, std::span(&seed, 1), step++));
  }
  state.SetLabel(std::string(kShapes[state.range(1)]) + kSettings[state.range(2)]);
}

void BM_FullSort(benchmark::State& state) {
  const std::vector<float> row =
      make_row(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const SamplingParams p = params_for(static_cast<int>(state.range(2)));
  uint64_t step = 0;
  for (auto _ : state) {
    const int32_t token =
        full_sort_sample(row, p, pagedserve::model::uniform_from_counter(7, step++));
    // and its logprob, as the old executor computed it (a scalar pass of std::exp)
    const double max_logit = *std::max_element(row.begin(), row.end());
    double z = 0.0;
    for (float l : row) z += std::exp(static_cast<double>(l) - max_logit);
    benchmark::DoNotOptimize(row[static_cast<size_t>(token)] - max_logit - std::log(z));
  }
  state.SetLabel(std::string(kShapes[state.range(1)]) + kSettings[state.range(2)]);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int vocab : {32000, 128256}) {
    for (int shape : {0, 1, 2}) {
      for (int setting = 0; setting < 6; ++setting) b->Args({vocab, shape, setting});
    }
  }
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Sampler)->Apply(Args);
BENCHMARK(BM_SamplerTokens)->Apply(Args);
BENCHMARK(BM_FullSort)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
