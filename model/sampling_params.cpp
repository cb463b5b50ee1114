// SamplingParams' checks: what a request may ask for, refused with a message naming the field.
#include <cmath>
#include <string>

#include "model/sampling_params.h"

namespace pagedserve::model {

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
  // Beams are scored over the raw distribution, which a grammar would have to reshape per beam.
  if (grammar) return "structured outputs are not supported with use_beam_search";
  return {};
}

}  // namespace pagedserve::model
