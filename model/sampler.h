// Sampler: picks the next token from one row of logits. Pure and stateless: randomness comes
// from a counter-based generator keyed by (seed, step), so a request's draws do not depend on
// what else shares its batch or on which thread runs it, and a seeded request replays exactly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/sampling_rows.h"
#include "model/sampling_params.h"

namespace pagedserve::model {

// Applies presence, frequency and repetition penalties (see SamplingParams) to `logits` in
// place, touching only the tokens seen (O(prompt + output), not O(vocabulary)). prompt_ids matter
// only to the repetition penalty; output_ids are the tokens this sequence generated so far.
void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids);

// A uniform double in [0, 1) determined only by (seed, step).
double uniform_from_counter(uint64_t seed, uint64_t step);

// Greedy picks the argmax (the lowest id among ties). Otherwise the logits are divided by the
// temperature, sorted (highest first, ties by lower id), filtered by top-k, top-p and min-p
// (each relative to the softmax of what remains, applied in that order as vLLM does),
// renormalised, and sampled by inverse CDF with uniform_from_counter(seed, step).
// That is the definition; the implementation never sorts the row (sampler.cpp, band_draw.h):
// O(vocabulary) in a few vectorised passes. A row with no finite maximum is sampled as greedy.
// Thread-safe (per-thread scratch buffers), so rows may be sampled in parallel.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                     uint64_t step);

// ---- log-probabilities (best_of ranking and beam search) ----
// Every logprob here is log_softmax of the raw logits row, before temperature and the top-k/p
// filters. vLLM v0 takes them after temperature; the raw distribution makes a sequence's score
// independent of how it was sampled (it is what OpenAI's `logprobs` report) and is exactly what
// beam search uses, where temperature must be 0 anyway.
struct TokenLogprob {
  int32_t token_id = -1;
  float logprob = 0.0f;
  friend bool operator==(const TokenLogprob&, const TokenLogprob&) = default;
};

float token_logprob(std::span<const float> logits, int32_t token);
// sample_token's token with its token_logprob, sharing the row's passes where they can.
TokenLogprob sample_token_logprob(std::span<const float> logits, const SamplingParams& params,
                                  uint64_t seed, uint64_t step);
// The same for several seeds of one row (a prompt forking into best_of samples): the row's
// passes, and its log-sum-exp, are made once for all of them. next_row: the row of as many
// logits this thread samples next, or null; it is read into cache while this row's exps are
// computed (a prefetch, nothing else: the draws do not depend on it).
// chunks: the row's chunk maxima when the LM head took them (kernels/cpu/sampling_rows.h),
// else empty; a greedy draw then reads one chunk of the row.
std::vector<TokenLogprob> sample_tokens_logprob(std::span<const float> logits,
                                                const SamplingParams& params,
                                                std::span<const uint64_t> seeds, uint64_t step,
                                                const float* next_row = nullptr,
                                                const kernels::RowChunkMaxima& chunks = {});
// The tokens alone, from the same passes (bit for bit sample_tokens_logprob's tokens), without
// the log-sum-exp a logprob needs: a pass of exps over the row fewer for greedy rows and
// temperatures other than 1.
std::vector<int32_t> sample_tokens(std::span<const float> logits, const SamplingParams& params,
                                   std::span<const uint64_t> seeds, uint64_t step,
                                   const float* next_row = nullptr,
                                   const kernels::RowChunkMaxima& chunks = {});
// The k most likely tokens, best first (ties: the lower id first); k is clamped to the vocab.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k);

// What a request that asked for logprobs (SamplingParams::logprobs) is told about one
// generated token. These follow vLLM v1's default logprobs_mode=raw_logprobs: log_softmax of
// the model's raw logits, before penalties, banned tokens (min_tokens), temperature and the
// top-k/p/min-p filters; the sampled token's own entry included even when it is not in `top`.
struct SampleLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;  // the k most likely, best first
  friend bool operator==(const SampleLogprobs&, const SampleLogprobs&) = default;
};
// One entry per token in `sampled` (the draws made from this row), all sharing the row's
// top k; one log-sum-exp and one partial sort for the whole row.
std::vector<SampleLogprobs> sample_logprobs(std::span<const float> raw_logits,
                                            std::span<const int32_t> sampled, int k);

}  // namespace pagedserve::model
