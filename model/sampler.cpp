// Sampler: greedy, temperature, top-k, top-p and min-p over one logits row.
#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace pagedserve::model {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// log(sum(exp(logits))), shifted by the max for stability.
double log_sum_exp(std::span<const float> logits) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - max_logit);
  return max_logit + std::log(total);
}

struct Candidate {
  float logit;
  int32_t id;
};

}  // namespace

std::string SamplingParams::validate() const {
  auto bad = [](const std::string& what) { return what; };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return bad("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (top_k < -1)
    return bad("top_k must be -1 (off), 0 (off) or positive, got " + std::to_string(top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (max_tokens < 1)
    return bad("max_tokens must be at least 1, got " + std::to_string(max_tokens));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return bad("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return bad("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 2.0f))
    return bad("repetition_penalty must be in (0, 2], got " + std::to_string(repetition_penalty));
  if (min_tokens < 0) return bad("min_tokens must be >= 0, got " + std::to_string(min_tokens));
  if (min_tokens > max_tokens)
    return bad("min_tokens (" + std::to_string(min_tokens) + ") must not exceed max_tokens (" +
               std::to_string(max_tokens) + ")");
  for (const std::string& s : stop) {
    if (s.empty()) return bad("stop strings must not be empty");
  }
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    return bad("logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
               std::to_string(*logprobs));
  }
  // Beams are reshuffled every step, so per-token logprobs would have to follow each beam's
  // history inside the scheduler; refused rather than reported wrong.
  if (logprobs && use_beam_search) return bad("logprobs is not supported with use_beam_search");
  return validate_sequences();
}

// The fields that shape a request's group of sequences (n, best_of, beam search), checked as
// vLLM v0 checks them.
std::string SamplingParams::validate_sequences() const {
  constexpr int kMaxSequences = 128;  // one request must not monopolise the batch
  if (n < 1 || n > kMaxSequences) {
    return "n must be in [1, " + std::to_string(kMaxSequences) + "], got " + std::to_string(n);
  }
  if (best_of && (*best_of < n || *best_of > kMaxSequences)) {
    return "best_of must be in [n, " + std::to_string(kMaxSequences) +
           "] (n = " + std::to_string(n) + "), got " + std::to_string(*best_of);
  }
  if (!std::isfinite(length_penalty)) {
    return "length_penalty must be a finite number, got " + std::to_string(length_penalty);
  }
  if (!use_beam_search) {
    if (num_sequences() > 1 && is_greedy()) {
      return "best_of (or n) must be 1 with greedy sampling (temperature 0 or top_k 1), got " +
             std::to_string(num_sequences());
    }
    return {};
  }
  if (num_sequences() < 2) return "use_beam_search needs best_of (or n) of at least 2";
  if (temperature > 1e-5f) {
    return "temperature must be 0 with use_beam_search, got " + std::to_string(temperature);
  }
  if (top_p < 1.0f) return "top_p must be 1 with use_beam_search, got " + std::to_string(top_p);
  if (top_k > 0) return "top_k must be 0 or -1 with use_beam_search, got " + std::to_string(top_k);
  if (min_p > 0.0f) return "min_p must be 0 with use_beam_search, got " + std::to_string(min_p);
  // Simplification: beams are reshuffled every step, so a stop string would have to be checked
  // on every candidate's text inside the scheduler; vLLM v0 does that, pagedserve refuses it.
  if (!stop.empty()) return "stop strings are not supported with use_beam_search";
  return {};
}

void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  if (params.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (int32_t id : prompt_ids)
      if (in_vocab(id)) seen[id] = true;
    for (int32_t id : output_ids)
      if (in_vocab(id)) seen[id] = true;
    for (int32_t id = 0; id < vocab; ++id) {
      if (!seen[id]) continue;
      logits[id] = logits[id] > 0 ? logits[id] / params.repetition_penalty
                                  : logits[id] * params.repetition_penalty;
    }
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    std::vector<int> counts(logits.size(), 0);
    for (int32_t id : output_ids)
      if (in_vocab(id)) ++counts[id];
    for (int32_t id = 0; id < vocab; ++id) {
      if (counts[id] == 0) continue;
      logits[id] -=
          params.frequency_penalty * static_cast<float>(counts[id]) + params.presence_penalty;
    }
  }
}

double uniform_from_counter(uint64_t seed, uint64_t step) {
  const uint64_t bits = splitmix64(seed ^ splitmix64(step + 0x632be59bd9b4e019ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                     uint64_t step) {
  if (params.is_greedy()) return argmax(logits);

  const int vocab = static_cast<int>(logits.size());
  std::vector<Candidate> candidates(vocab);
  for (int i = 0; i < vocab; ++i) candidates[i] = {logits[i] / params.temperature, i};
  auto by_logit_desc = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };

  // Top-k keeps the k largest; the survivors are sorted so top-p can walk them in order.
  size_t keep = candidates.size();
  if (params.top_k > 0 && params.top_k < vocab) keep = static_cast<size_t>(params.top_k);
  std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), by_logit_desc);
  candidates.resize(keep);

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
  const double target = uniform_from_counter(seed, step) * mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cumulative += probs[i];
    if (target < cumulative) return candidates[i].id;
  }
  return candidates[probs.size() - 1].id;
}

float token_logprob(std::span<const float> logits, int32_t token) {
  return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) -
                            log_sum_exp(logits));
}

namespace {

std::vector<TokenLogprob> top_logprobs_with(std::span<const float> logits, int k, double lse) {
  const int vocab = static_cast<int>(logits.size());
  k = std::clamp(k, 0, vocab);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenLogprob> out(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    out[i] = {ids[i], static_cast<float>(static_cast<double>(logits[ids[i]]) - lse)};
  }
  return out;
}

}  // namespace

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
