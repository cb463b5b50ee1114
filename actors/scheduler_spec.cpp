// Scheduler, the speculative-decoding half: which sequences get n-gram proposals in a step
// (the policy), and applying a row that verified them (accepted draws, then the KV slots
// settled: accepted kept, rejected truncated). See "Speculative decoding" in scheduler.h.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "actors/scheduler.h"

namespace pagedserve::actors {

bool Scheduler::may_speculate(const SequenceGroup& group, const Sequence& seq) const {
  const model::SamplingParams& params = group.sampling;
  if (seq.finished() || !group.forked || group.is_beam_search()) return false;
  if (!kv_->has_sequence(seq.seq_id)) return false;
  // Proposals follow the sequence's last token, which a step in flight may still draw (the
  // executor knows it when it fills the slots); a grammar row's need it known.
  if (!seq.pending_rows.empty() && !proposes_ahead(group)) return false;
  if (group.num_tokens(seq) - seq.num_computed_tokens != 1) return false;
  // Before min_tokens the banned ids depend on the position; not worth the complexity.
  return static_cast<int>(seq.output_token_ids.size()) >= params.min_tokens;
}

namespace {
// An n-gram try that found nothing to propose waits this many steps before the next.
constexpr int kNgramRetrySteps = 4;
}  // namespace

void Scheduler::propose_tokens() {
  speculating_ = false;
  if (!config_.speculative.enabled()) return;
  // Every group's, not only the running ones': a group resumed from swap this step must not
  // verify proposals made before it was preempted.
  for (auto& [id, group] : groups_) {
    for (Sequence& seq : group.seqs) seq.proposal.clear();
  }
  int num_seqs = 0;
  for (uint64_t id : running_) num_seqs += groups_.at(id).num_live();
  const int limit = config_.speculative.max_batch();
  if (num_seqs == 0 || (limit != 0 && num_seqs > limit)) return;
  // The acceptance a verifying row needs to pay for its extra rows grows with the batch (on
  // the CPU: ~0.2 tokens alone, ~0.6 at two, ~1.5 at four; docs/speculative-decoding.md).
  // n-gram proposals only: their verification draws exactly what a lone step would, so
  // holding a sequence back changes no output; a draft's sampled draws depend on which steps
  // verify, and a bar that moved with the batch would make them depend on the batch.
  const double min_accepted = config_.speculative.method == SpeculativeMethod::kNgram
                                  ? config_.speculative.min_accepted_per_seq * (num_seqs - 0.5)
                                  : 0.0;
  // A try costs the whole batch (its extra rows, and the overlap of the step before it), so
  // the wait between tries grows with the batch: none alone, up to 4x at two, 16x at four.
  const int max_probe_interval =
      std::min(SpeculativeConfig::kSpeculativeProbeInterval * num_seqs * num_seqs,
               SpeculativeConfig::kSpeculativeMaxProbeInterval);
  for (uint64_t id : running_) {
    SequenceGroup& group = groups_.at(id);
    for (Sequence& seq : group.seqs) {
      if (seq.finished()) continue;
      const bool below =
          seq.spec_accepted_average >= 0.0 && seq.spec_accepted_average < min_accepted;
      if (!below || seq.spec_probe_interval == 0) {
        seq.spec_probe_interval = SpeculativeConfig::kSpeculativeProbeInterval;
      }
      const bool held = below && seq.spec_held_steps + 1 < seq.spec_probe_interval;
      if (held || seq.spec_wait_steps > 0) {  // counted in every step, those planned ahead too
        if (held) ++seq.spec_held_steps;
        if (seq.spec_wait_steps > 0) --seq.spec_wait_steps;
        const bool held_next = below && seq.spec_held_steps + 1 < seq.spec_probe_interval;
        // With a draft or a grammar, the step after this one is planned ahead (while this one
        // runs) only when no sequence would propose in it (their proposals need every token
        // known): held sequences give overlap back until one's next try is due.
        if (!held_next && seq.spec_wait_steps == 0 && !proposes_ahead(group)) speculating_ = true;
        continue;
      }
      if (!proposes_ahead(group)) speculating_ = true;
      if (!may_speculate(group, seq)) continue;
      // Under the policy, a sequence whose first row, or a try after being held, is still in
      // flight waits for its outcome: the step planned ahead would otherwise repeat the try
      // (the average it is judged by does not count that row yet).
      if (min_accepted > 0.0 && has_unverified_proposals(seq) &&
          (seq.spec_accepted_average < 0.0 || below)) {
        continue;
      }
      seq.spec_held_steps = 0;
      if (below) {  // a try: the next, if this one does not lift the average, waits longer
        seq.spec_probe_interval = std::min(2 * seq.spec_probe_interval, max_probe_interval);
      }
      // With a step in flight: as if it accepts all its proposals (the row moves back over
      // the ones it rejects).
      const int num_tokens = group.num_tokens(seq);
      const int num_out = num_tokens - static_cast<int>(group.prompt_token_ids.size());
      // The step emits up to K + 1 tokens: never past max_tokens or max_model_len.
      const int cap = std::min({proposal_length(seq), group.sampling.max_tokens - num_out - 1,
                                config_.max_model_len - num_tokens - 1});
      if (cap <= 0) continue;
      // Slots the executor fills, with the draft's proposals or the n-gram lookup's on the
      // tokens it knows by then (a step in flight's draws included).
      seq.proposal.assign(static_cast<size_t>(cap), kProposalSlotToken);
    }
  }
}

void Scheduler::record_accepted(Sequence& seq, int num_accepted) {
  // Half weight to the newest: a sequence that stops repeating its prompt is held back within
  // two or three steps, one that starts again after its next try.
  seq.spec_accepted_average = seq.spec_accepted_average < 0.0
                                  ? num_accepted
                                  : 0.5 * seq.spec_accepted_average + 0.5 * num_accepted;
}

int Scheduler::proposal_length(const Sequence& seq) const {
  return seq.spec_num_tokens > 0 ? seq.spec_num_tokens : config_.speculative.num_speculative_tokens;
}

void Scheduler::adapt_proposal_length(Sequence& seq, int num_proposed, int num_accepted) const {
  const SpeculativeConfig& spec = config_.speculative;
  if (spec.max_speculative_tokens == 0) return;  // a fixed length
  const int current = proposal_length(seq);
  // All accepted: the text is being copied, longer rows pay (a row costs ~5% more per extra
  // token, an accepted token saves a whole step). A rejection: one fewer, so a loose match
  // stops paying for rows it throws away. A row cut short by max_tokens or by the match's
  // end says nothing about the length.
  if (num_accepted == num_proposed) {
    if (num_proposed == current) seq.spec_num_tokens = std::min(current + 2, spec.max_tokens());
  } else {
    seq.spec_num_tokens = std::max(current - 1, 1);
  }
}

int32_t Scheduler::planned_token(const SequenceGroup& group, const Sequence& seq, int i) const {
  const int total = group.num_tokens(seq);
  if (i < total) return group.token_at(seq, i);
  return seq.proposal.at(static_cast<size_t>(i - total));
}

bool Scheduler::proposes_ahead(const SequenceGroup& group) const { return !group.sampling.grammar; }

bool Scheduler::has_unverified_proposals(const Sequence& seq) {
  for (const PendingRow& row : seq.pending_rows) {
    if (row.num_proposals > 0) return true;
  }
  return false;
}

bool Scheduler::first_slot_speculative(const Sequence& seq, const PlannedSeq& planned) {
  if (seq.pending_rows.empty()) return false;  // the first token is known
  if (planned.num_proposed > 0) return true;
  for (const PendingRow& row : seq.pending_rows) {
    if (row.num_speculative_slots() > 0) return true;  // an append after them must be one too
  }
  return false;
}

PendingRow Scheduler::pending_row(const Sequence& seq, const PlannedSeq& planned,
                                  const ScheduledSequence& scheduled) const {
  PendingRow row;
  row.num_proposals = scheduled.num_proposed_tokens;
  row.first_slot_speculative = !planned.allocate && first_slot_speculative(seq, planned);
  return row;
}

int Scheduler::count_accepted(const Sequence& seq, const SequenceStepOutput& output,
                              const std::vector<int32_t>& proposals) const {
  const std::vector<model::TokenLogprob>& samples = output.samples;
  const size_t num_proposed = proposals.size();
  if (samples.empty() || samples.size() > num_proposed + 1) {
    throw std::logic_error("Scheduler::update: sequence " + std::to_string(seq.seq_id) +
                           " verified " + std::to_string(num_proposed) + " proposals and drew " +
                           std::to_string(samples.size()) + " tokens");
  }
  for (size_t i = 0; i + 1 < samples.size(); ++i) {
    if (samples[i].token_id != proposals[i]) {
      throw std::logic_error("Scheduler::update: sequence " + std::to_string(seq.seq_id) +
                             " accepted a draw that differs from its proposal");
    }
  }
  return static_cast<int>(samples.size()) - 1;
}

void Scheduler::apply_decode_row(SequenceGroup& group, Sequence& seq,
                                 const SequenceStepOutput& output, const PendingRow& row,
                                 RequestUpdate& update) {
  const std::vector<model::TokenLogprob>& samples = output.samples;
  // The executor filled the slots: a draft all of them, the n-gram lookup as many as it found.
  const int num_slots = row.num_proposals;
  const std::vector<int32_t> no_proposals;
  const std::vector<int32_t>& proposals = num_slots > 0 ? output.proposed_token_ids : no_proposals;
  const bool draft = config_.speculative.method == SpeculativeMethod::kDraft;
  if (static_cast<int>(proposals.size()) > num_slots ||
      (draft && static_cast<int>(proposals.size()) != num_slots)) {
    throw std::logic_error("Scheduler::update: sequence " + std::to_string(seq.seq_id) + " got " +
                           std::to_string(proposals.size()) + " proposals for " +
                           std::to_string(num_slots) + " slots");
  }
  const int num_accepted = count_accepted(seq, output, proposals);
  const int num_proposed = static_cast<int>(proposals.size());
  if (num_proposed > 0) {
    ++stats_.num_spec_rows;
    stats_.num_spec_proposed_tokens += num_proposed;
    stats_.num_spec_accepted_tokens += num_accepted;
    seq.num_proposed_tokens += num_proposed;
    seq.num_accepted_tokens += num_accepted;
    record_accepted(seq, num_accepted);
    if (!draft) adapt_proposal_length(seq, num_proposed, num_accepted);
  } else if (num_slots > 0) {
    // Nothing to copy yet: look again in a few steps, overlapped meanwhile (not a miss: the
    // text may repeat itself soon).
    seq.spec_wait_steps = kNgramRetrySteps;
  }
  // The row's first token was the draw of the row before it: the last output until now.
  const int32_t first_token =
      seq.output_token_ids.empty() ? kPlaceholderToken : seq.output_token_ids.back();
  // Each draw is a token as if sampled alone: stop checks after each, nothing after a stop.
  for (size_t i = 0; i < samples.size() && !seq.finished(); ++i) {
    const bool grammar_ended = i < output.grammar_ended.size() && output.grammar_ended[i] != 0;
    append_sample(group, seq, samples[i], update, grammar_ended);
    if (i < output.reported_logprobs.size()) {
      update.seqs.back().logprobs.push_back(output.reported_logprobs[i]);
    }
  }
  if (seq.finished()) return;  // its blocks, speculative slots included, are freed
  // Preempted by recompute while the step ran: no blocks, nothing computed.
  if (!kv_->has_sequence(seq.seq_id)) return;
  if (row.num_speculative_slots() > 0) {
    std::vector<int32_t> settled;
    if (row.first_slot_speculative) settled.push_back(first_token);
    settled.insert(settled.end(), proposals.begin(), proposals.begin() + num_accepted);
    int num_later = 0;  // slots of the row planned after this one, still speculative
    for (const PendingRow& later : seq.pending_rows) num_later += later.num_speculative_slots();
    const int num_settled = static_cast<int>(settled.size());
    emit(cache::KvMemoryOp::settle_speculative(seq.seq_id, num_settled, std::move(settled),
                                               num_later));
  }
  // The slots counted as computed since planning; the rejected ones are not (a row planned
  // after this one is moved back over them by the executor, SampledTokenCarry).
  seq.num_computed_tokens -= num_slots - num_accepted;
  if (draft && num_slots > 0) {
    // The draft wrote its K/V from the sequence's last token through its second-to-last
    // proposal; they hold up to the last accepted proposal (the first rejected one's are
    // stale, and the last proposal was never run). The row's first token sat just before its
    // draws, which now end the sequence.
    const int first_position = group.num_known_tokens(seq) - (num_accepted + 1) - 1;
    if (!seq.pending_rows.empty() && seq.pending_rows.front().num_proposals > 0) {
      // A row planned past this one set it as if every slot were accepted: it moves back
      // with that row (SampledTokenCarry moves the row's draft context the same way).
      seq.draft_num_computed_tokens -= num_slots - num_accepted;
    } else {
      seq.draft_num_computed_tokens = first_position + std::min(num_slots, num_accepted + 1);
    }
  }
}

}  // namespace pagedserve::actors
