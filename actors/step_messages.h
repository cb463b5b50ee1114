// The messages between the scheduler and the executor for one engine step: what to compute
// (StepInput) and what came out (StepOutput). Movable values that own their data, so they can
// cross threads unchanged when the executor becomes an actor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/block_manager.h"
#include "model/sampler.h"
#include "model/sampling_params.h"

namespace pagedserve::actors {

// Overlap scheduling: step N+1 is planned while step N runs, so a sequence that samples in N
// continues in N+1 with this placeholder where N's token goes (in new_token_ids and
// penalty_output_ids). The executor replaces it with the token it sampled for that same
// sequence in the previous step (SampledTokenCarry) before running the step. Never a real
// vocabulary id.
inline constexpr int32_t kPlaceholderToken = -1;
// Speculative decoding: a proposal slot whose token the executor fills in before the step's
// forward pass (a draft model's proposal, or the n-gram lookup's on the tokens the executor
// knows; the scheduler may not know them yet). Never a real vocabulary id, and distinct from
// kPlaceholderToken, which SampledTokenCarry replaces.
inline constexpr int32_t kProposalSlotToken = -2;

// One sequence's share of a step.
struct ScheduledSequence {
  uint64_t request_id = 0;             // the request (sequence group) the sequence belongs to
  uint64_t seq_id = 0;                 // the block manager's id for this sequence
  std::vector<int32_t> new_token_ids;  // tokens whose K/V this step computes (see above)
  int num_computed_tokens = 0;         // tokens already in the cache before this step
  // Device blocks covering all computed + new tokens; kNoBlock (-1) for the leading blocks a
  // sliding window released (cache/block_manager.h), which attention never reads.
  std::vector<int32_t> block_table;
  bool sample = false;  // logits wanted: false for a prompt chunk that is not last
  // Set when sample is true: the request's params, one copy per request shared by all its
  // sequences and steps (not copied per sequence per step).
  std::shared_ptr<const model::SamplingParams> sampling;
  // One RNG stream per token to draw from this row (each keyed by (seed, sample_step)): one
  // for a decode, best_of for the prompt of a sampling group (one per child), none for beam
  // search (which only reads top_logprobs).
  std::vector<uint64_t> sample_seeds;
  uint64_t sample_step = 0;               // tokens this sequence sampled so far: the RNG counter
  std::vector<int32_t> banned_token_ids;  // never drawn this step (EOS, stop ids < min_tokens)
  // Only when sampling->has_penalties() or sampling->grammar: the history the penalties look at
  // and the grammar matcher follows (GrammarRowStates replays it when it lost the sequence).
  std::vector<int32_t> penalty_prompt_ids;  // the prompt (repetition penalty only)
  std::vector<int32_t> penalty_output_ids;  // tokens this sequence generated so far
  int num_top_logprobs = 0;  // (token, logprob) candidates wanted: 2 * beam width, or 0
  // Speculative decoding: the last num_proposed_tokens of new_token_ids are proposals, not
  // sampled tokens (their slots are speculative in the block manager). The row wants logits at
  // its last num_proposed_tokens + 1 positions and verifies them in order (sample_rows.h): a
  // draw equal to the proposal is accepted and the next position is drawn, the first other
  // draw (or the draw after the last proposal) ends the row. Only for a decode with one seed.
  int num_proposed_tokens = 0;
  // Overlap scheduling past a verifying step: the row was planned while the step before it
  // (in which this sequence verified proposals) ran, as if all of them were accepted. Of the
  // tokens counted in num_computed_tokens and sample_step, the last num_tentative_tokens are
  // those proposal slots; histories (penalty_output_ids, proposal_context) end with a
  // kPlaceholderToken for each of them and one for the draw. The executor, which knows what
  // the step drew, moves the row back over the rejected slots and writes the drawn tokens
  // into the histories (SampledTokenCarry).
  int num_tentative_tokens = 0;
  // n-gram proposals: the sequence's tokens through new_token_ids' first, which the executor
  // looks its proposals up in (actors/ngram_proposer.h). Empty for other rows.
  std::vector<int32_t> proposal_context;
  // Draft-model proposals (the proposals are kProposalSlotToken): the draft model's cache
  // shares this block table and holds the draft's K/V for the first draft_num_computed_tokens
  // positions; draft_context_ids are the tokens from there up to num_computed_tokens, which
  // the draft runs before new_token_ids' first (the sequence's last token) to propose.
  int draft_num_computed_tokens = 0;
  std::vector<int32_t> draft_context_ids;
  // Filled by the executor's draft for a sampled (not greedy) row: [num_proposed_tokens,
  // vocab], the distribution q each proposal was drawn from, which the verification's
  // rejection rule needs (sample_rows.h). Empty for point-mass (greedy or n-gram) proposals.
  std::vector<float> draft_probs;
};

// A row with proposal slots for the executor to fill (the last num_proposed_tokens).
inline bool has_proposal_slots(const ScheduledSequence& seq) {
  return seq.num_proposed_tokens > 0 && !seq.new_token_ids.empty() &&
         seq.new_token_ids.back() == kProposalSlotToken;
}
inline bool has_proposal_slots(const std::vector<ScheduledSequence>& seqs) {
  return std::any_of(seqs.begin(), seqs.end(),
                     [](const ScheduledSequence& seq) { return has_proposal_slots(seq); });
}

struct StepInput {
  uint64_t step_id = 0;
  // The executor applies the three lists in this order (the scheduler makes its block-manager
  // calls grouped the same way: every swap_out, then every swap_in, then appends/allocations).
  std::vector<cache::BlockCopy> swap_out;      // device -> cpu, before the step
  std::vector<cache::BlockCopy> swap_in;       // cpu -> device, before the step
  std::vector<cache::BlockCopy> block_copies;  // device -> device (copy-on-write)
  std::vector<ScheduledSequence> seqs;
};

// What one scheduled sequence produced; both lists are empty where sample was false.
struct SequenceStepOutput {
  // [sample_seeds.size()], drawn tokens; with proposals, 1 to num_proposed_tokens + 1 draws
  // in order: every one but the last equals its proposal (accepted).
  std::vector<model::TokenLogprob> samples;
  std::vector<model::TokenLogprob> top_logprobs;  // [num_top_logprobs], best first
  // Only when sampling->logprobs is set: what the client is told about each draw, parallel to
  // `samples` (raw logprobs, model/sampler.h: SampleLogprobs).
  std::vector<model::SampleLogprobs> reported_logprobs;
  // Only when sampling->grammar: per draw, whether the grammar is complete after it and allows
  // nothing more (an end token was drawn, or no byte may follow): the sequence stops there.
  std::vector<uint8_t> grammar_ended;
  // Rows that had proposal slots: the proposals the executor made and verified (as many as
  // the n-gram lookup found, up to the slots; a draft fills them all).
  std::vector<int32_t> proposed_token_ids;
};

// Where an executor's step time went, in seconds (an executor that does not measure a stage
// leaves it 0). Summed into EngineStats for /metrics and the engine log line.
struct ExecutorStageTimes {
  double copies_s = 0;    // swap-in/out and copy-on-write block copies
  double forward_s = 0;   // the model's forward pass, logits included
  double sampling_s = 0;  // penalties, sampling and logprobs of every row
};

struct StepOutput {
  uint64_t step_id = 0;
  std::vector<SequenceStepOutput> seqs;  // [StepInput::seqs.size()], in the same order
  ExecutorStageTimes times;
};

}  // namespace pagedserve::actors
