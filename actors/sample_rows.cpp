// sample_step_rows: one task per sampling row on the thread pool.
#include "actors/sample_rows.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

#include "model/sampler.h"

namespace pagedserve::actors {
namespace {

// A row costs a few vectorised passes over the vocabulary: worth waking the pool for two rows
// of a 32k vocabulary (the pool's threshold is in FLOP-equivalents).
constexpr double kSamplingFlopsPerLogit = 10.0;

bool in_row(int32_t id, std::span<const float> logits) {
  return id >= 0 && static_cast<size_t>(id) < logits.size();
}

// Sets the banned ids' logits to -inf; returns what they were (restore_tokens puts them back).
std::vector<float> ban_tokens(std::span<float> logits, std::span<const int32_t> banned) {
  std::vector<float> before;
  before.reserve(banned.size());
  for (int32_t id : banned) {
    before.push_back(in_row(id, logits) ? logits[id] : 0.0f);
    if (in_row(id, logits)) logits[id] = -std::numeric_limits<float>::infinity();
  }
  return before;
}

void restore_tokens(std::span<float> logits, std::span<const int32_t> banned,
                    std::span<const float> before) {
  for (size_t i = banned.size(); i-- > 0;) {  // backwards: a repeated id gets its first value
    if (in_row(banned[i], logits)) logits[banned[i]] = before[i];
  }
}

bool has_finite(std::span<const float> logits) {
  return std::any_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
}

}  // namespace

void sample_step_rows(const std::vector<ScheduledSequence>& seqs, std::span<const float> logits,
                      size_t vocab, kernels::ThreadPool* pool, std::vector<SequenceStepOutput>& out,
                      GrammarRowStates* grammars, uint64_t step_id) {
  std::vector<size_t> sampling_seqs;           // row r -> index in seqs
  std::vector<GrammarRowState*> row_grammars;  // [row], null when unconstrained
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].sample) continue;
    if (!seqs[i].sampling) {
      throw std::invalid_argument("sequence " + std::to_string(seqs[i].seq_id) +
                                  " samples but has no sampling params");
    }
    sampling_seqs.push_back(i);
    GrammarRowState* state = nullptr;
    if (seqs[i].sampling->grammar) {
      if (grammars == nullptr) {
        throw std::invalid_argument("sequence " + std::to_string(seqs[i].seq_id) +
                                    " is constrained by a grammar this executor cannot apply");
      }
      state = &grammars->sync(seqs[i], step_id);  // replays, serially, before the rows run
    }
    row_grammars.push_back(state);
  }
  if (grammars != nullptr) grammars->prune(step_id);
  if (logits.size() < sampling_seqs.size() * vocab) {
    throw std::invalid_argument("sample_step_rows: " + std::to_string(sampling_seqs.size()) +
                                " sampling rows but logits for " +
                                std::to_string(vocab == 0 ? 0 : logits.size() / vocab));
  }
  // Pool tasks must not throw: each row keeps its error, the first is rethrown below.
  std::vector<std::exception_ptr> errors(sampling_seqs.size());
  kernels::parallel_for(
      pool, static_cast<int64_t>(sampling_seqs.size()),
      kSamplingFlopsPerLogit * static_cast<double>(sampling_seqs.size() * vocab), [&](int64_t row) {
        const size_t r = static_cast<size_t>(row);
        const size_t i = sampling_seqs[r];
        try {
          out[i] = sample_row(seqs[i], logits.subspan(r * vocab, vocab), row_grammars[r]);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

SequenceStepOutput sample_row(const ScheduledSequence& seq, std::span<const float> raw_logits,
                              GrammarRowState* grammar) {
  const model::SamplingParams& sampling = *seq.sampling;
  std::span<const float> row_logits = raw_logits;  // raw: what reported logprobs describe
  std::vector<float> masked;
  if (!seq.banned_token_ids.empty() || sampling.has_penalties() || grammar != nullptr) {
    masked.assign(raw_logits.begin(), raw_logits.end());
    model::apply_penalties(masked, sampling, seq.penalty_prompt_ids, seq.penalty_output_ids);
    if (grammar != nullptr) {
      const int64_t left = int64_t{sampling.max_tokens} - static_cast<int64_t>(seq.sample_step) - 1;
      mask_logits(*grammar, masked, static_cast<size_t>(std::max<int64_t>(left, 0)));
    }
    const std::vector<float> unbanned = ban_tokens(masked, seq.banned_token_ids);
    // The grammar allows only tokens min_tokens bans (it is complete): the grammar wins.
    if (grammar != nullptr && !unbanned.empty() && !has_finite(masked)) {
      restore_tokens(masked, seq.banned_token_ids, unbanned);
    }
    row_logits = masked;
  }
  SequenceStepOutput out;
  if (!seq.sample_seeds.empty()) {
    out.samples =
        model::sample_tokens_logprob(row_logits, sampling, seq.sample_seeds, seq.sample_step);
  }
  if (grammar != nullptr) out.grammar_ended = advance_on_draws(*grammar, out.samples);
  if (seq.num_top_logprobs > 0) {
    out.top_logprobs = model::top_logprobs(row_logits, seq.num_top_logprobs);
  }
  if (sampling.logprobs) {
    std::vector<int32_t> drawn;
    for (const model::TokenLogprob& sample : out.samples) drawn.push_back(sample.token_id);
    out.reported_logprobs = model::sample_logprobs(raw_logits, drawn, *sampling.logprobs);
  }
  return out;
}

}  // namespace pagedserve::actors
