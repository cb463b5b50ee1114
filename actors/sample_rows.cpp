// sample_step_rows: one task per sampling row on the thread pool.
#include "actors/sample_rows.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

#include "model/sampler.h"
#include "model/sampling_distribution.h"

namespace pagedserve::actors {
namespace {

// A drawn token's logprob when its request does not need one (SamplingParams::
// needs_sampled_logprob): the output's cumulative_logprob is then NaN, unknown.
constexpr float kNoLogprob = std::numeric_limits<float>::quiet_NaN();

// One row's draws (one per seed), with their logprobs only when the request needs them: the
// row's log-sum-exp is a pass of exps over it, as long as the draw itself for a greedy row.
std::vector<model::TokenLogprob> draw_row(std::span<const float> row,
                                          const model::SamplingParams& sampling,
                                          std::span<const uint64_t> seeds, uint64_t step,
                                          const float* next_row = nullptr,
                                          const kernels::RowChunkMaxima& chunks = {}) {
  if (sampling.needs_sampled_logprob()) {
    return model::sample_tokens_logprob(row, sampling, seeds, step, next_row, chunks);
  }
  std::vector<model::TokenLogprob> out;
  for (int32_t token : model::sample_tokens(row, sampling, seeds, step, next_row, chunks)) {
    out.push_back({token, kNoLogprob});
  }
  return out;
}

float drawn_logprob(std::span<const float> row, const model::SamplingParams& sampling,
                    int32_t token) {
  return sampling.needs_sampled_logprob() ? model::token_logprob(row, token) : kNoLogprob;
}

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

// The row a draw at output position `step` is made from: penalties over `history`, the
// grammar's mask (its budget: the tokens max_tokens leaves after this one), banned tokens (the
// grammar wins when it allows only banned ones, being complete). `raw` itself when none apply.
std::span<const float> constrained_row(const ScheduledSequence& seq, std::span<const float> raw,
                                       std::span<const int32_t> history,
                                       const GrammarRowState* grammar, uint64_t step,
                                       std::vector<float>& masked) {
  const model::SamplingParams& sampling = *seq.sampling;
  if (seq.banned_token_ids.empty() && !sampling.has_penalties() && grammar == nullptr) return raw;
  masked.assign(raw.begin(), raw.end());
  model::apply_penalties(masked, sampling, seq.penalty_prompt_ids, history);
  if (grammar != nullptr) mask_logits(*grammar, masked, tokens_after(sampling, step));
  const std::vector<float> unbanned = ban_tokens(masked, seq.banned_token_ids);
  if (grammar != nullptr && !unbanned.empty() && !has_finite(masked)) {
    restore_tokens(masked, seq.banned_token_ids, unbanned);
  }
  return masked;
}

// After draw `token` of a verifying row: advances the grammar (if any) and records whether it
// ended there. True when the row must stop drawing (the grammar allows nothing more).
bool advance_grammar(GrammarRowState* grammar, int32_t token, SequenceStepOutput& out) {
  if (grammar == nullptr) return false;
  const model::TokenLogprob draw{token, 0.0f};
  const uint8_t ended = advance_on_draws(*grammar, std::span(&draw, 1))[0];
  out.grammar_ended.push_back(ended);
  return ended != 0;
}

}  // namespace

void sample_step_rows(const std::vector<ScheduledSequence>& seqs, std::span<const float> logits,
                      size_t vocab, kernels::ThreadPool* pool, std::vector<SequenceStepOutput>& out,
                      GrammarRowStates* grammars, uint64_t step_id,
                      const kernels::ChunkMaxima& chunks) {
  std::vector<size_t> sampling_seqs;           // row r -> index in seqs
  std::vector<size_t> first_logits;            // row r -> its first row of logits
  std::vector<GrammarRowState*> row_grammars;  // [row], null when unconstrained
  size_t num_logit_rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].sample) continue;
    if (!seqs[i].sampling) {
      throw std::invalid_argument("sequence " + std::to_string(seqs[i].seq_id) +
                                  " samples but has no sampling params");
    }
    if (seqs[i].num_proposed_tokens > 0 &&
        (seqs[i].sample_seeds.size() != 1 || seqs[i].num_top_logprobs > 0)) {
      throw std::invalid_argument("sequence " + std::to_string(seqs[i].seq_id) +
                                  " verifies proposals but is not a single-draw decode");
    }
    sampling_seqs.push_back(i);
    first_logits.push_back(num_logit_rows);
    num_logit_rows += 1 + static_cast<size_t>(std::max(seqs[i].num_proposed_tokens, 0));
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
  if (logits.size() < num_logit_rows * vocab) {
    throw std::invalid_argument("sample_step_rows: " + std::to_string(num_logit_rows) +
                                " rows of logits wanted but logits for " +
                                std::to_string(vocab == 0 ? 0 : logits.size() / vocab));
  }
  // Pool tasks must not throw: each row keeps its error, the first is rethrown below. Each
  // thread takes a contiguous share of the rows, in order, so the row after this one is
  // usually its next: it is prefetched while this one is sampled (the rows come from the LM
  // head's matmul, out of cache by now: 128k-vocabulary rows then cost ~40 us more each).
  std::vector<std::exception_ptr> errors(sampling_seqs.size());
  kernels::parallel_for_contiguous(
      pool, static_cast<int64_t>(sampling_seqs.size()),
      kSamplingFlopsPerLogit * static_cast<double>(sampling_seqs.size() * vocab), [&](int64_t row) {
        const size_t r = static_cast<size_t>(row);
        const size_t i = sampling_seqs[r];
        try {
          if (seqs[i].num_proposed_tokens > 0) {
            const size_t rows = 1 + static_cast<size_t>(seqs[i].num_proposed_tokens);
            out[i] = verify_row(seqs[i], logits.subspan(first_logits[r] * vocab, rows * vocab),
                                row_grammars[r]);
          } else {
            const float* next_row = r + 1 < sampling_seqs.size()
                                        ? logits.data() + first_logits[r + 1] * vocab
                                        : nullptr;
            out[i] =
                sample_row(seqs[i], logits.subspan(first_logits[r] * vocab, vocab), row_grammars[r],
                           next_row, chunks.row(static_cast<int64_t>(first_logits[r])));
          }
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

bool step_reads_chunk_maxima(const std::vector<ScheduledSequence>& seqs) {
  return std::any_of(seqs.begin(), seqs.end(), [](const ScheduledSequence& s) {
    return s.sample && s.sampling && s.sampling->is_greedy() && s.num_proposed_tokens == 0;
  });
}

SequenceStepOutput sample_row(const ScheduledSequence& seq, std::span<const float> raw_logits,
                              GrammarRowState* grammar, const float* next_row,
                              const kernels::RowChunkMaxima& chunks) {
  const model::SamplingParams& sampling = *seq.sampling;
  std::vector<float> masked;
  // raw_logits stay what reported logprobs describe.
  const std::span<const float> row_logits =
      constrained_row(seq, raw_logits, seq.penalty_output_ids, grammar, seq.sample_step, masked);
  SequenceStepOutput out;
  if (!seq.sample_seeds.empty()) {
    // The maxima describe the raw row: a row changed by penalties, bans or a mask has its own.
    const kernels::RowChunkMaxima row_chunks =
        row_logits.data() == raw_logits.data() ? chunks : kernels::RowChunkMaxima{};
    out.samples =
        draw_row(row_logits, sampling, seq.sample_seeds, seq.sample_step, next_row, row_chunks);
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

namespace pagedserve::actors {

namespace {

// The standard rule (Leviathan et al. 2023, Chen et al. 2023) for proposals x_j drawn from the
// draft's q_j: x_j is accepted with probability min(1, p_j(x_j) / q_j(x_j)), p_j being the
// distribution a lone step would draw from at position j (penalties over the accepted history,
// banned tokens, temperature and filters: model/sampling_distribution.h); the first rejected
// position instead draws from max(0, p_j - q_j) renormalised, and after K accepted the bonus
// token is drawn from p_K as a lone step would. Each emitted token is then distributed as p.
// The acceptance test uses the row's stream at (seed, sample_step + j), the residual draw a
// stream of its own, so a seeded request replays exactly.
SequenceStepOutput verify_drafted_row(const ScheduledSequence& seq, std::span<const float> logits,
                                      GrammarRowState* grammar) {
  const model::SamplingParams& sampling = *seq.sampling;
  const int num_proposed = seq.num_proposed_tokens;
  const size_t vocab = logits.size() / static_cast<size_t>(num_proposed + 1);
  if (seq.draft_probs.size() != static_cast<size_t>(num_proposed) * vocab) {
    throw std::invalid_argument("sequence " + std::to_string(seq.seq_id) + " has " +
                                std::to_string(seq.draft_probs.size()) +
                                " draft probabilities for " + std::to_string(num_proposed) +
                                " proposals of a " + std::to_string(vocab) + "-token vocabulary");
  }
  const size_t first_proposal = seq.new_token_ids.size() - static_cast<size_t>(num_proposed);
  const uint64_t seed = seq.sample_seeds.at(0);
  std::vector<int32_t> history = seq.penalty_output_ids;
  std::vector<float> masked;
  std::vector<float> p;
  SequenceStepOutput out;
  auto emit = [&](std::span<const float> raw, std::span<const float> row, int32_t token) {
    out.samples.push_back({token, drawn_logprob(row, sampling, token)});
    if (sampling.logprobs) {
      const int32_t drawn[1] = {token};
      out.reported_logprobs.push_back(model::sample_logprobs(raw, drawn, *sampling.logprobs)[0]);
    }
  };
  for (int j = 0; j <= num_proposed; ++j) {
    const std::span<const float> raw = logits.subspan(static_cast<size_t>(j) * vocab, vocab);
    const uint64_t step = seq.sample_step + static_cast<uint64_t>(j);
    const std::span<const float> row = constrained_row(seq, raw, history, grammar, step, masked);
    if (j == num_proposed) {  // every proposal accepted: the bonus token, as a lone step
      const std::span<const uint64_t> seeds = std::span<const uint64_t>(seq.sample_seeds).first(1);
      const model::TokenLogprob draw = draw_row(row, sampling, seeds, step)[0];
      emit(raw, row, draw.token_id);
      advance_grammar(grammar, draw.token_id, out);
      break;
    }
    const int32_t proposal = seq.new_token_ids[first_proposal + static_cast<size_t>(j)];
    const std::span<const float> q =
        std::span<const float>(seq.draft_probs).subspan(static_cast<size_t>(j) * vocab, vocab);
    model::sampling_distribution(row, sampling, p);
    const size_t x = static_cast<size_t>(proposal);
    const double u = model::uniform_from_counter(seed, step);
    if (x < vocab && q[x] > 0.0f && u * q[x] < p[x]) {
      emit(raw, row, proposal);
      if (advance_grammar(grammar, proposal, out)) break;
      history.push_back(proposal);
      continue;
    }
    double residual_mass = 0.0;
    for (size_t t = 0; t < vocab; ++t) {
      p[t] = std::max(p[t] - q[t], 0.0f);
      residual_mass += p[t];
    }
    if (residual_mass <= 0.0) model::sampling_distribution(row, sampling, p);  // p == q
    const double v = model::uniform_from_counter(seed ^ 0x9e3779b97f4a7c15ULL, step);
    const int32_t token = model::sample_from_distribution(p, v);
    emit(raw, row, token);
    advance_grammar(grammar, token, out);
    break;
  }
  return out;
}

}  // namespace

// Drawing position j exactly as a step without proposals would (the same penalties over the
// same history, the same RNG stream (seed, sample_step + j)) and accepting the proposal when the
// draw equals it is the rejection rule for a point-mass draft: the proposal x is kept with
// probability p(x), and on a mismatch the draw is distributed as p with x removed,
// renormalised. So the tokens are exactly those of the same request without speculation.
SequenceStepOutput verify_row(const ScheduledSequence& seq, std::span<const float> logits,
                              GrammarRowState* grammar) {
  if (!seq.draft_probs.empty()) return verify_drafted_row(seq, logits, grammar);
  const model::SamplingParams& sampling = *seq.sampling;
  const int num_proposed = seq.num_proposed_tokens;
  const size_t vocab = logits.size() / static_cast<size_t>(num_proposed + 1);
  const size_t first_proposal = seq.new_token_ids.size() - static_cast<size_t>(num_proposed);
  std::vector<int32_t> history = seq.penalty_output_ids;  // grows with each accepted draw
  std::vector<float> masked;
  SequenceStepOutput out;
  for (int j = 0; j <= num_proposed; ++j) {
    const std::span<const float> raw = logits.subspan(static_cast<size_t>(j) * vocab, vocab);
    const uint64_t step = seq.sample_step + static_cast<uint64_t>(j);
    const std::span<const float> row = constrained_row(seq, raw, history, grammar, step, masked);
    // sample_row's call, so that the draw is bit for bit the one a lone step makes.
    const model::TokenLogprob draw =
        draw_row(row, sampling, std::span<const uint64_t>(seq.sample_seeds).first(1), step)[0];
    out.samples.push_back(draw);
    if (sampling.logprobs) {
      const int32_t drawn[1] = {draw.token_id};
      out.reported_logprobs.push_back(model::sample_logprobs(raw, drawn, *sampling.logprobs)[0]);
    }
    if (advance_grammar(grammar, draw.token_id, out)) break;  // the grammar is complete
    if (j == num_proposed || draw.token_id != seq.new_token_ids[first_proposal + j]) break;
    history.push_back(draw.token_id);
  }
  return out;
}

}  // namespace pagedserve::actors
