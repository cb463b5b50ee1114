// Sampler: greedy, temperature, top-k, top-p and min-p over one logits row.
//
// The definition is the sorted one (see sampler.h): sort the row by scaled logit, cut it with
// top-k, top-p and min-p, walk the cumulative distribution. Sorting a 32k-128k row costs
// milliseconds, so the row is instead bucketed by its distance below the maximum in one
// vectorised pass (kernels/cpu/sampling_rows.h), each bucket knowing its count and mass. The
// walks over the sorted order then step over whole buckets, split a bucket where a cut or the
// draw lands into finer sub-buckets (model/bucketed_row.h), step over those the same way, and
// sort only the sub-bucket where it lands: the same tokens as the full sort, for a few passes
// over the row. Probabilities of the elements walked one by one use std::exp exactly as the
// sorted definition does; bucket masses differ from the element-by-element sums only in
// rounding (~1e-16), so a draw can differ only when it lands that close to a boundary.
//
// The clients' defaults, a temperature with nothing filtered or with top-p or min-p alone, skip the
// histogram: its per-element scatter is most of a draw's cost, and the draw needs only the
// total mass, the mass before the few elements where it (and the top-p cut) lands, and those
// elements. The band draw (model/band_draw.h) estimates where from a subsample and gets all
// of them in one vectorised pass; rows it cannot decide come back here.
#include "model/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "kernels/cpu/sampling_rows.h"
#include "model/band_draw.h"
#include "model/bucketed_row.h"

namespace pagedserve::model {
namespace {

using sampling::BucketedRow;
using sampling::by_logit_desc;
using sampling::Candidate;
using sampling::kNumBuckets;
using sampling::kNumSubBuckets;
using sampling::Masses;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The sorted definition on candidates already sorted by by_logit_desc (all of them kept by
// top-k): softmax, top-p, min-p, renormalise, inverse CDF at u.
int32_t sample_sorted(std::span<const Candidate> candidates, const SamplingParams& params,
                      double u) {
  std::vector<double> probs(candidates.size());
  const double max_logit = candidates.front().logit;
  double total = 0.0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    probs[i] = std::exp(static_cast<double>(candidates[i].logit) - max_logit);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  // Top-p: the smallest prefix whose mass reaches top_p (at least one token).
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t n = 0;
    while (n < probs.size()) {
      cumulative += probs[n++];
      if (cumulative >= params.top_p) break;
    }
    probs.resize(n);
  }
  // Min-p: drop tokens less likely than min_p times the most likely one.
  if (params.min_p > 0.0f) {
    const double threshold = params.min_p * probs.front();
    size_t n = 0;
    while (n < probs.size() && probs[n] >= threshold) ++n;
    probs.resize(std::max<size_t>(n, 1));
  }

  const double mass = std::accumulate(probs.begin(), probs.end(), 0.0);
  const double target = u * mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cumulative += probs[i];
    if (target < cumulative) return candidates[i].id;
  }
  return candidates[probs.size() - 1].id;
}

// Where top-p and min-p cut the sorted row: everything in the buckets before `bucket` and the
// first `in_bucket` positions of that opened bucket (bucket == kNumBuckets: nothing cut).
struct Cut {
  int bucket = kNumBuckets;
  size_t in_bucket = 0;
  double mass = 0.0;  // the kept probability
};

Cut find_cut(BucketedRow& row, const SamplingParams& params) {
  const bool top_p = params.top_p < 1.0f;
  const bool min_p = params.min_p > 0.0f;
  // The sorted definition's threshold: min_p times the top probability, exp(0) / total.
  const double min_p_threshold = params.min_p * (1.0 / row.total());
  double cumulative = 0.0;
  // Whether a bucket or sub-bucket lies wholly before the cut: top-p still short of its
  // target by more than the slack after it, and every element in it clear of min-p.
  auto whole = [&](double prob, double min_ratio) {
    return (!top_p || cumulative + prob < params.top_p - row.slack()) &&
           (!min_p || min_ratio > params.min_p);
  };
  for (int b = 0; b < kNumBuckets; ++b) {
    if (!row.occupied(b)) continue;
    if (whole(row.prob(b), row.min_ratio(b))) {
      cumulative += row.prob(b);
      continue;
    }
    for (int s = 0; s < kNumSubBuckets; ++s) {
      if (row.sub_begin(b, s) == row.sub_end(b, s)) continue;
      if (whole(row.sub_prob(b, s), row.sub_min_ratio(b, s))) {
        cumulative += row.sub_prob(b, s);
        continue;
      }
      const size_t first = row.sub_begin(b, s);
      const std::span<const Candidate> sorted = row.sub_sorted(b, s);
      for (size_t j = 0; j < sorted.size(); ++j) {
        const double p = row.prob(sorted[j]);
        // Both sides over the same total, p from std::exp as the definition has it: decided
        // whatever the masses' precision (no row.less).
        if (min_p && p < min_p_threshold) return {b, first + j, cumulative};
        cumulative += p;
        if (top_p && !row.less(cumulative, params.top_p)) return {b, first + j + 1, cumulative};
      }
    }
  }
  return {kNumBuckets, 0, cumulative};
}

// The last token the cut keeps (the sorted definition's answer when rounding leaves a draw
// past the kept mass).
int32_t last_kept(BucketedRow& row, const Cut& cut) {
  if (cut.bucket < kNumBuckets && cut.in_bucket > 0)
    return row.at(cut.bucket, cut.in_bucket - 1).id;
  for (int b = std::min(cut.bucket, kNumBuckets) - 1; b >= 0; --b) {
    if (row.occupied(b)) return row.at(b, row.size(b) - 1).id;
  }
  for (int b = 0; b < kNumBuckets; ++b) {  // an empty cut keeps the top token, as max(n, 1)
    if (row.occupied(b)) return row.at(b, 0).id;
  }
  return 0;
}

int32_t walk_to(BucketedRow& row, const Cut& cut, double target) {
  double cumulative = 0.0;
  // Whether a bucket or sub-bucket's mass ends short of the target by more than the slack.
  auto whole = [&](double prob) { return cumulative + prob < target - row.slack(); };
  for (int b = 0; b <= std::min(cut.bucket, kNumBuckets - 1); ++b) {
    if (!row.occupied(b)) continue;
    const bool cut_here = b == cut.bucket;
    if (!cut_here && whole(row.prob(b))) {
      cumulative += row.prob(b);
      continue;
    }
    // Positions [0, end) of the bucket are kept; sub-buckets wholly inside that are stepped
    // over like buckets, the one the cut splits is walked up to it.
    const size_t end = cut_here ? cut.in_bucket : row.size(b);
    for (int s = 0; s < kNumSubBuckets && row.sub_begin(b, s) < end; ++s) {
      const size_t first = row.sub_begin(b, s);
      if (first == row.sub_end(b, s)) continue;
      if (row.sub_end(b, s) <= end && whole(row.sub_prob(b, s))) {
        cumulative += row.sub_prob(b, s);
        continue;
      }
      const std::span<const Candidate> sorted = row.sub_sorted(b, s);
      for (size_t j = 0; j < std::min(sorted.size(), end - first); ++j) {
        cumulative += row.prob(sorted[j]);
        if (row.less(target, cumulative)) return sorted[j].id;
      }
    }
  }
  row.mark_undecided();  // the draw fell past the kept mass: only rounding does that
  return last_kept(row, cut);
}

// Top-k: the k best found from bucket counts alone (gather the buckets that hold them, sort
// just those), then the sorted definition on them for each draw; bit-identical to a full sort.
std::vector<int32_t> sample_top_k(std::span<const float> logits, const SamplingParams& params,
                                  kernels::RowRange range, std::span<const double> us) {
  BucketedRow row(logits, params.temperature, range, Masses::kNone);
  const size_t k = static_cast<size_t>(params.top_k);
  int last = 0;
  for (size_t seen = 0; last < kNumBuckets - 1; ++last) {
    seen += static_cast<size_t>(row.count(last));
    if (seen >= k) break;
  }
  std::vector<Candidate>& candidates = row.gather(0, last);
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(k),
                    candidates.end(), by_logit_desc);
  std::vector<int32_t> tokens;
  for (double u : us) tokens.push_back(sample_sorted(std::span(candidates).first(k), params, u));
  return tokens;
}

// A masked row (a grammar's mask between JSON values, banned tokens) may leave only a few
// tokens above -inf. Up to this many, they are collected and the sorted definition run on them
// alone: exact, and cheaper than bucketing the whole row, whose float masses also decide such
// rows poorly (the -inf tokens stretch the bucketed span to 48 nats).
constexpr size_t kFewCandidates = 1024;

// The tokens above -inf, scaled by the temperature and sorted, when there are at most
// kFewCandidates of them (NaNs, never drawn, are not collected); nothing otherwise.
std::optional<std::vector<Candidate>> few_candidates(std::span<const float> logits,
                                                     float temperature) {
  std::vector<Candidate> out;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > -std::numeric_limits<float>::infinity()) {
      if (out.size() == kFewCandidates) return std::nullopt;
      out.push_back({logits[i] / temperature, static_cast<int32_t>(i)});
    }
  }
  std::sort(out.begin(), out.end(), by_logit_desc);
  return out;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Below this a row's histogram costs little and the band draw's subsample would be most of it.
constexpr int64_t kBandDrawMinVocab = 4096;

struct Draws {
  std::vector<int32_t> tokens;                              // one per uniform
  double log_sum_exp = kNaN;                                // of the raw row, if known
  float row_max = std::numeric_limits<float>::quiet_NaN();  // of the raw row, if known
};

// One token per uniform in `us`, all from the same passes over the row (the cut does not
// depend on the draw; only the walk does).
Draws draw(std::span<const float> logits, const SamplingParams& params, std::span<const double> us,
           const float* next_row = nullptr, const kernels::RowChunkMaxima& chunks = {}) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto first_max = [&] {
    const int64_t from_chunks =
        chunks.empty() ? -1 : kernels::argmax_from_chunk_maxima(logits.data(), vocab, chunks);
    const int64_t argmax =
        from_chunks >= 0 ? from_chunks : kernels::row_argmax(logits.data(), vocab);
    Draws out{std::vector<int32_t>(us.size(), static_cast<int32_t>(argmax))};
    out.row_max = logits[static_cast<size_t>(argmax)];  // NaN only when every element is
    return out;
  };
  if (params.is_greedy()) return first_max();
  // The clients' defaults (a temperature, perhaps top-p or min-p): the band draw, without the
  // bucketed histogram, when it can decide the draw; the bucketed row otherwise.
  const bool band_drawn =
      (params.top_k <= 0 || params.top_k >= vocab) && !(params.top_p < 1.0f && params.min_p > 0.0f);
  if (band_drawn && us.size() == 1 && vocab >= kBandDrawMinVocab) {
    if (std::optional<sampling::BandDraw> band = sampling::band_draw(
            logits, params.temperature, us[0], params.top_p, params.min_p, next_row)) {
      Draws out{{band->token}, kNaN, band->row_max};
      if (params.temperature == 1.0f) out.log_sum_exp = band->row_max + std::log(band->total);
      return out;
    }
  }
  const kernels::RowRange range = kernels::row_min_max(logits.data(), vocab);
  // No finite maximum (every token banned, or an infinite or NaN row): no distribution to
  // sample; the first maximum, as greedy.
  if (!std::isfinite(range.max / params.temperature)) return first_max();
  if (range.min == -std::numeric_limits<float>::infinity()) {
    if (std::optional<std::vector<Candidate>> few = few_candidates(logits, params.temperature)) {
      const size_t kept =
          params.top_k > 0 ? std::min(few->size(), static_cast<size_t>(params.top_k)) : few->size();
      Draws out{{}, kNaN, range.max};
      for (double u : us)
        out.tokens.push_back(sample_sorted(std::span(*few).first(kept), params, u));
      return out;
    }
  }
  if (params.top_k > 0 && params.top_k < vocab) {
    return Draws{sample_top_k(logits, params, range, us), kNaN, range.max};
  }

  // Float masses first; a row where they cannot decide a cut or a draw (a value within their
  // error of a boundary: ~1e-4 of draws on a trained model's peaked row, ~10% on the flat rows
  // of a random 32k model) is redone with double masses.
  for (Masses masses : {Masses::kSingle, Masses::kDouble}) {
    BucketedRow row(logits, params.temperature, range, masses);
    const Cut cut = find_cut(row, params);
    Draws out;
    out.row_max = range.max;
    for (double u : us) out.tokens.push_back(walk_to(row, cut, u * cut.mass));
    if (row.undecided()) continue;
    // At temperature 1 the histogram's total is the raw row's partition function (from float
    // exps: within ~1e-7 relative in practice, 3e-6 at worst, of the exact one).
    if (params.temperature == 1.0f) out.log_sum_exp = range.max + std::log(row.total());
    return out;
  }
  return {};  // unreachable: double masses always decide
}

// row_max: the row's largest non-NaN element when the caller knows it (greedy's argmax
// found it), else NaN. The sum comes from float exps (~1e-7 relative, 3e-6 at worst, of
// the exact one: well inside a float logprob's rounding) unless the row has no finite maximum.
double log_sum_exp(std::span<const float> logits,
                   float row_max = std::numeric_limits<float>::quiet_NaN()) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (std::isnan(row_max)) row_max = kernels::row_min_max(logits.data(), n).max;
  if (std::isfinite(row_max)) {
    return row_max + std::log(kernels::row_sum_exp_f32(logits.data(), n, row_max));
  }
  return row_max + std::log(kernels::row_sum_exp(logits.data(), n, row_max));
}

// The k most likely tokens, best first (ties: the lower id first), by one pass that keeps
// the best k seen in a heap whose top is the worst of them.
std::vector<int32_t> top_ids(std::span<const float> logits, int k) {
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int32_t> heap;
  heap.reserve(static_cast<size_t>(k));
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (int32_t id = 0; id < vocab && k > 0; ++id) {
    if (heap.size() < static_cast<size_t>(k)) {
      heap.push_back(id);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(id, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = id;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  return heap;
}

std::vector<TokenLogprob> top_logprobs_with(std::span<const float> logits, int k, double lse) {
  const std::vector<int32_t> ids =
      top_ids(logits, std::clamp(k, 0, static_cast<int>(logits.size())));
  std::vector<TokenLogprob> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    out[i] = {ids[i], static_cast<float>(static_cast<double>(logits[ids[i]]) - lse)};
  }
  return out;
}

}  // namespace

void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids) {
  // Sparse: only the tokens the sequence has seen are touched, each once.
  const int32_t vocab = static_cast<int32_t>(logits.size());
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  std::vector<int32_t> ids;
  if (params.repetition_penalty != 1.0f) {
    ids.reserve(prompt_ids.size() + output_ids.size());
    for (std::span<const int32_t> part : {prompt_ids, output_ids}) {
      for (int32_t id : part)
        if (in_vocab(id)) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int32_t id : ids) {
      logits[id] = logits[id] > 0 ? logits[id] / params.repetition_penalty
                                  : logits[id] * params.repetition_penalty;
    }
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    ids.clear();
    for (int32_t id : output_ids)
      if (in_vocab(id)) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      logits[ids[i]] -=
          params.frequency_penalty * static_cast<float>(j - i) + params.presence_penalty;
      i = j;
    }
  }
}

double uniform_from_counter(uint64_t seed, uint64_t step) {
  const uint64_t bits = splitmix64(seed ^ splitmix64(step + 0x632be59bd9b4e019ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                     uint64_t step) {
  const double u = uniform_from_counter(seed, step);
  return draw(logits, params, std::span(&u, 1)).tokens[0];
}

// One uniform per seed, at this step.
std::vector<double> uniforms(std::span<const uint64_t> seeds, uint64_t step) {
  std::vector<double> us;
  for (uint64_t seed : seeds) us.push_back(uniform_from_counter(seed, step));
  return us;
}

std::vector<TokenLogprob> sample_tokens_logprob(std::span<const float> logits,
                                                const SamplingParams& params,
                                                std::span<const uint64_t> seeds, uint64_t step,
                                                const float* next_row,
                                                const kernels::RowChunkMaxima& chunks) {
  const Draws d = draw(logits, params, uniforms(seeds, step), next_row, chunks);
  const double lse = std::isnan(d.log_sum_exp) ? log_sum_exp(logits, d.row_max) : d.log_sum_exp;
  std::vector<TokenLogprob> out;
  for (int32_t token : d.tokens) {
    out.push_back(
        {token, static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - lse)});
  }
  return out;
}

std::vector<int32_t> sample_tokens(std::span<const float> logits, const SamplingParams& params,
                                   std::span<const uint64_t> seeds, uint64_t step,
                                   const float* next_row, const kernels::RowChunkMaxima& chunks) {
  return draw(logits, params, uniforms(seeds, step), next_row, chunks).tokens;
}

TokenLogprob sample_token_logprob(std::span<const float> logits, const SamplingParams& params,
                                  uint64_t seed, uint64_t step) {
  return sample_tokens_logprob(logits, params, std::span(&seed, 1), step)[0];
}

float token_logprob(std::span<const float> logits, int32_t token) {
  return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) -
                            log_sum_exp(logits));
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k) {
  return top_logprobs_with(logits, k, log_sum_exp(logits));
}

std::vector<SampleLogprobs> sample_logprobs(std::span<const float> raw_logits,
                                            std::span<const int32_t> sampled, int k) {
  std::vector<SampleLogprobs> out;
  if (sampled.empty()) return out;
  const double lse = log_sum_exp(raw_logits);
  std::vector<TokenLogprob> top = top_logprobs_with(raw_logits, k, lse);
  for (int32_t token : sampled) {
    SampleLogprobs entry;
    entry.sampled = {token, static_cast<float>(
                                static_cast<double>(raw_logits[static_cast<size_t>(token)]) - lse)};
    entry.top = top;
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace pagedserve::model
