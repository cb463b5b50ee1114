// SamplingParams: how one request picks its tokens and when it stops, as in vLLM's
// SamplingParams and OpenAI's request fields.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pagedserve::model {

namespace grammar {
class CompiledGrammar;  // model/grammar/matcher.h
}

// Largest SamplingParams::logprobs accepted (vLLM's default max_logprobs).
inline constexpr int kMaxLogprobs = 20;

struct SamplingParams {
  float temperature = 1.0f;      // 0 = greedy
  float top_p = 1.0f;            // (0, 1]; 1 = off
  int top_k = 0;                 // 0 or -1 = off
  float min_p = 0.0f;            // [0, 1]; 0 = off
  std::optional<uint64_t> seed;  // same seed and prompt -> same output
  int max_tokens = 16;
  int min_tokens = 0;  // EOS, stop ids and stop strings are ignored until this many tokens exist
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  // Generation stops when the text contains one of these; the returned text ends before it
  // (vLLM's include_stop_str_in_output=false). Checked on detokenized text, not on ids.
  std::vector<std::string> stop;

  // Penalties, applied to the logits before temperature, as vLLM does: presence subtracts a
  // constant from every token already generated, frequency subtracts per occurrence, and
  // repetition (Hugging Face's) divides positive / multiplies negative logits of every token in
  // the prompt or the output.
  float presence_penalty = 0.0f;    // [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;   // [-2, 2]; 0 = off
  float repetition_penalty = 1.0f;  // (0, 2]; 1 = off
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }

  int n = 1;                     // completions returned
  std::optional<int> best_of;    // completions generated (>= n); the n most likely are returned
  bool use_beam_search = false;  // beam width = best_of (or n); needs temperature 0
  float length_penalty = 1.0f;   // beam score = cumulative logprob / length ^ length_penalty

  // Report each generated token's logprob and this many top candidates (vLLM's
  // SamplingParams.logprobs; nullopt: none, at no cost). Raw logprobs: log_softmax of the
  // model's logits before penalties, temperature and the top-k/p/min-p filters (model/sampler.h).
  std::optional<int> logprobs;

  // Structured output (response_format, guided_json/regex/choice/grammar, GBNF): every token
  // drawn must continue a sentence of this grammar, and end tokens only where one is complete;
  // generation stops (finish_reason "stop") once the grammar allows nothing more. Null: free.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  // Empty when valid, else a message naming the bad field, e.g. "top_p must be in (0, 1], got 2".
  std::string validate() const;
  std::string validate_sequences() const;  // n, best_of, beam search (part of validate)
  bool is_greedy() const { return temperature < 1e-5f || top_k == 1; }
  // Sequences generated per request: best_of when given, else n.
  int num_sequences() const { return best_of.value_or(n); }
  // Whether each drawn token's logprob (the cumulative_logprob of an output) is wanted: to rank
  // best_of > n samples or beams, or because the request asked for logprobs. Otherwise the
  // CPU sampler skips it: at a temperature other than 1, and greedy, it is a whole pass of exps
  // over the row (vLLM v1 reports no cumulative logprob then either).
  bool needs_sampled_logprob() const {
    return use_beam_search || num_sequences() > n || logprobs.has_value();
  }
};

}  // namespace pagedserve::model
