// Scheduler, the update half: applying a step's samples to the groups (a prompt forks into
// best_of children, beams are selected), token-level stop checks (EOS, stop ids, max_tokens,
// max_model_len), and finishing requests (final outputs, aborts, errors, stop strings).
#include <algorithm>
#include <set>
#include <stdexcept>

#include "actors/beam_search.h"
#include "actors/scheduler.h"

namespace pagedserve::actors {

std::vector<RequestUpdate> Scheduler::update(const StepInput& input, const StepOutput& output) {
  if (planned_) {
    throw std::logic_error("Scheduler::update: a planned step waits for its memory result");
  }
  if (output.seqs.size() != input.seqs.size()) {
    throw std::logic_error("Scheduler::update: the output has " +
                           std::to_string(output.seqs.size()) + " sequences, the step " +
                           std::to_string(input.seqs.size()));
  }
  if (!input.seqs.empty()) {
    auto step = std::find_if(in_flight_.begin(), in_flight_.end(),
                             [&](const InFlightStep& s) { return s.step_id == input.step_id; });
    if (step == in_flight_.end()) {
      throw std::logic_error("Scheduler::update: step " + std::to_string(input.step_id) +
                             " is not in flight");
    }
    for (uint64_t seq_id : step->seq_ids) {
      auto count = in_flight_steps_of_seq_.find(seq_id);
      if (--count->second == 0) in_flight_steps_of_seq_.erase(count);
    }
    in_flight_.erase(step);
  }
  // Requests finished outside a step (aborts, errors found by schedule()) report first.
  std::vector<RequestUpdate> updates = std::move(pending_);
  pending_.clear();

  // Collect the sampled rows per request, in order (computed tokens advanced in schedule()).
  std::vector<uint64_t> order;
  std::map<uint64_t, std::vector<size_t>> rows;
  std::vector<PendingRow> applied(input.seqs.size());  // each sampled row, as it was planned
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& scheduled = input.seqs[i];
    auto it = groups_.find(scheduled.request_id);
    if (it == groups_.end()) continue;  // aborted or finished while the step ran
    Sequence* seq = it->second.find(scheduled.seq_id);
    if (seq == nullptr) continue;  // ended while the step ran (its output is discarded)
    if (!scheduled.sample) continue;
    if (seq->pending_rows.empty()) {
      throw std::logic_error("Scheduler::update: sequence " + std::to_string(seq->seq_id) +
                             " has no row pending in step " + std::to_string(input.step_id));
    }
    // Known now: the draws go to the outputs.
    applied[i] = std::move(seq->pending_rows.front());
    seq->pending_rows.pop_front();
    auto [entry, inserted] = rows.try_emplace(scheduled.request_id);
    if (inserted) order.push_back(scheduled.request_id);
    entry->second.push_back(i);
  }

  for (uint64_t id : order) {
    SequenceGroup& group = groups_.at(id);
    RequestUpdate update = group.is_beam_search()
                               ? beam_step(group, input, output, rows[id])
                               : sample_step(group, input, output, rows[id], applied);
    if (group.num_live() == 0) finish_group(group, update);
    updates.push_back(std::move(update));
  }

  // Blocks of sequences that ended while in this step are free once no step in flight uses them.
  for (auto it = deferred_frees_.begin(); it != deferred_frees_.end();) {
    if (is_in_flight(*it)) {
      ++it;
      continue;
    }
    if (kv_->has_sequence(*it)) emit(cache::KvMemoryOp::free(*it));
    it = deferred_frees_.erase(it);
  }
  flush_owned();
  return updates;
}

RequestUpdate Scheduler::sample_step(SequenceGroup& group, const StepInput& input,
                                     const StepOutput& output, const std::vector<size_t>& rows,
                                     const std::vector<PendingRow>& applied) {
  RequestUpdate update = new_update(group);
  for (size_t row : rows) {
    const std::vector<model::TokenLogprob>& samples = output.seqs[row].samples;
    if (samples.empty()) {
      throw std::logic_error("Scheduler::update: no sample for request " +
                             std::to_string(group.request_id));
    }
    const std::vector<model::SampleLogprobs>& reported = output.seqs[row].reported_logprobs;
    const std::vector<uint8_t>& grammar_ended = output.seqs[row].grammar_ended;
    const auto ended = [&](size_t i) { return i < grammar_ended.size() && grammar_ended[i] != 0; };
    // The client's logprobs ride on the update append_sample just made for draw i.
    const auto attach_logprobs = [&](size_t i) {
      if (i < reported.size()) update.seqs.back().logprobs.push_back(reported[i]);
    };
    if (group.forked) {
      apply_decode_row(group, *group.find(input.seqs[row].seq_id), output.seqs[row], applied[row],
                       update);
      continue;
    }
    // The prompt's logits: fork the one sequence into best_of children that share its blocks
    // (copy-on-write), each taking the draw made on its own stream.
    group.forked = true;
    for (size_t i = 1; i < samples.size(); ++i) {
      Sequence child = group.seqs.front();
      child.seq_id = next_seq_id_++;
      child.index = static_cast<int>(i);
      fork_seq(group.seqs.front().seq_id, child.seq_id);
      group.seqs.push_back(std::move(child));
    }
    for (size_t i = 0; i < samples.size(); ++i) {
      append_sample(group, group.seqs[i], samples[i], update, ended(i));
      attach_logprobs(i);
    }
  }
  return update;
}

void Scheduler::append_sample(SequenceGroup& group, Sequence& seq,
                              const model::TokenLogprob& sample, RequestUpdate& update,
                              bool grammar_ended) {
  seq.output_token_ids.push_back(sample.token_id);
  seq.output_logprobs.push_back(sample.logprob);
  seq.cumulative_logprob += sample.logprob;
  // The step planned ahead reserved this token's slot before its value was known.
  if (kv_->has_sequence(seq.seq_id) && kv_->has_pending_token(seq.seq_id)) {
    emit(cache::KvMemoryOp::resolve_pending(seq.seq_id, sample.token_id));
  }
  seq.finish_reason = check_stop(group, seq);
  // A complete structured output stops the sequence whatever ignore_eos and min_tokens say:
  // the grammar allows no further token.
  if (grammar_ended && !seq.finished()) seq.finish_reason = FinishReason::kStop;
  if (seq.finished()) free_seq(seq);
  if (!update.seqs.empty() && update.seqs.back().index == seq.index) {
    // A further draw of the same row (speculative decoding): one update per sequence.
    SequenceUpdate& change = update.seqs.back();
    change.new_token_ids.push_back(sample.token_id);
    change.cumulative_logprob = seq.cumulative_logprob;
    change.finish_reason = seq.finish_reason;
    return;
  }
  SequenceUpdate change;
  change.index = seq.index;
  change.new_token_ids = {sample.token_id};
  change.cumulative_logprob = seq.cumulative_logprob;
  change.finish_reason = seq.finish_reason;
  update.seqs.push_back(std::move(change));
}

// vLLM v0's beam step: candidates from every live beam, finished ones compete with the kept
// finished beams, the best beam_width live ones continue. A continuing candidate takes its
// parent's sequence (and blocks) over when it is the parent's first; further ones fork it.
RequestUpdate Scheduler::beam_step(SequenceGroup& group, const StepInput& input,
                                   const StepOutput& output, const std::vector<size_t>& rows) {
  const int width = group.sampling.num_sequences();
  std::vector<BeamParent> parents;
  std::vector<uint64_t> parent_ids;
  for (size_t row : rows) {
    const Sequence& seq = *group.find(input.seqs[row].seq_id);
    parents.push_back({seq.cumulative_logprob, output.seqs[row].top_logprobs});
    parent_ids.push_back(seq.seq_id);
  }
  std::vector<Sequence> children;
  std::vector<ScoredCandidate> scored;
  for (const BeamCandidate& candidate : top_beam_candidates(parents, 2 * width)) {
    Sequence child = *group.find(parent_ids[candidate.parent]);
    child.output_token_ids.push_back(candidate.token_id);
    child.cumulative_logprob = candidate.cumulative_logprob;
    child.finish_reason = check_stop(group, child);
    scored.push_back({candidate, child.finished(), beam_score_of(group, child)});
    children.push_back(std::move(child));
  }
  std::vector<const Sequence*> finished;
  std::vector<double> finished_scores;
  for (const Sequence& seq : group.seqs) {
    if (!seq.finished()) continue;
    finished.push_back(&seq);
    finished_scores.push_back(beam_score_of(group, seq));
  }
  const BeamSelection selection = select_beams(finished_scores, scored, width);

  std::vector<Sequence> next;
  for (size_t i : selection.keep_finished) next.push_back(*finished[i]);
  for (size_t i : selection.new_finished) {
    next.push_back(children[i]);
    next.back().seq_id = 0;  // a finished beam holds no blocks
  }
  std::set<uint64_t> claimed;
  for (size_t i : selection.continuing) {
    Sequence beam = children[i];
    const uint64_t parent_id = parent_ids[scored[i].candidate.parent];
    if (!claimed.insert(parent_id).second) {
      beam.seq_id = next_seq_id_++;
      fork_seq(parent_id, beam.seq_id);
    }
    beam.index = static_cast<int>(next.size());
    next.push_back(std::move(beam));
  }
  // Frees come after every fork so that shared blocks stay alive while being forked.
  for (Sequence& seq : group.seqs) {
    if (seq.finished() || claimed.count(seq.seq_id) != 0) continue;
    const bool sampled =
        std::find(parent_ids.begin(), parent_ids.end(), seq.seq_id) != parent_ids.end();
    if (sampled || selection.done) {
      free_seq(seq);
    } else {
      next.push_back(seq);  // did not sample this step (never with lockstep planning)
    }
  }
  group.forked = true;
  group.seqs = std::move(next);
  return new_update(group);
}

bool Scheduler::is_eos(int32_t token) const {
  return std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), token) !=
         config_.eos_token_ids.end();
}

FinishReason Scheduler::check_stop(const SequenceGroup& group, const Sequence& seq) const {
  const model::SamplingParams& params = group.sampling;
  const int32_t last = seq.output_token_ids.back();
  const int num_out = static_cast<int>(seq.output_token_ids.size());
  if (num_out > params.min_tokens) {
    const auto& stops = params.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), last) != stops.end()) return FinishReason::kStop;
    if (!params.ignore_eos && is_eos(last)) return FinishReason::kStop;
  }
  if (num_out >= params.max_tokens) return FinishReason::kLength;
  // Known tokens only: a sample a later step in flight draws is not this one's.
  const int num_known = static_cast<int>(group.prompt_token_ids.size()) + num_out;
  if (num_known >= config_.max_model_len) return FinishReason::kLength;
  return FinishReason::kNone;
}

double Scheduler::beam_score_of(const SequenceGroup& group, const Sequence& seq) const {
  const bool ends_in_eos = !seq.output_token_ids.empty() && is_eos(seq.output_token_ids.back());
  return beam_score(seq.cumulative_logprob, group.num_tokens(seq), ends_in_eos,
                    group.sampling.length_penalty);
}

std::vector<CompletedSequence> Scheduler::final_outputs(SequenceGroup& group) const {
  std::vector<const Sequence*> ranked;
  for (const Sequence& seq : group.seqs) ranked.push_back(&seq);
  const bool beam = group.is_beam_search();
  if (beam) {
    std::stable_sort(ranked.begin(), ranked.end(), [&](const Sequence* a, const Sequence* b) {
      return beam_score_of(group, *a) > beam_score_of(group, *b);
    });
  } else if (group.sampling.num_sequences() != group.sampling.n) {
    // best_of > n: the n with the highest cumulative logprob (vLLM v0).
    std::stable_sort(ranked.begin(), ranked.end(), [](const Sequence* a, const Sequence* b) {
      return a->cumulative_logprob > b->cumulative_logprob;
    });
  }
  ranked.resize(std::min(ranked.size(), static_cast<size_t>(group.sampling.n)));
  std::vector<CompletedSequence> outputs;
  for (const Sequence* seq : ranked) {
    CompletedSequence out;
    out.index = static_cast<int>(outputs.size());
    out.source_index = beam ? -1 : seq->index;
    out.token_ids = seq->output_token_ids;
    out.cumulative_logprob = seq->cumulative_logprob;
    if (!beam) out.token_logprobs = seq->output_logprobs;
    out.finish_reason = seq->finish_reason;
    outputs.push_back(std::move(out));
  }
  return outputs;
}

void Scheduler::free_seq(Sequence& seq) {
  if (seq.seq_id == 0 || !kv_->has_sequence(seq.seq_id)) return;
  // Still part of a step in flight (overlap): the executor may be writing its blocks.
  if (is_in_flight(seq.seq_id)) {
    deferred_frees_.insert(seq.seq_id);
    return;
  }
  emit(cache::KvMemoryOp::free(seq.seq_id));
}

RequestUpdate Scheduler::new_update(const SequenceGroup& group) const {
  RequestUpdate update;
  update.request_id = group.request_id;
  update.num_cached_tokens = std::max(group.num_cached_tokens, 0);
  for (const Sequence& seq : group.seqs) {
    update.num_proposed_tokens += seq.num_proposed_tokens;
    update.num_accepted_tokens += seq.num_accepted_tokens;
  }
  return update;
}

void Scheduler::finish_group(SequenceGroup& group, RequestUpdate& update) {
  for (Sequence& seq : group.seqs) {
    if (!seq.finished()) free_seq(seq);
  }
  emit(cache::KvMemoryOp::release_group(group.request_id));
  update.finished = true;
  update.outputs = final_outputs(group);
  update.num_cached_tokens = std::max(group.num_cached_tokens, 0);
  update.num_proposed_tokens = 0;
  update.num_accepted_tokens = 0;
  for (const Sequence& seq : group.seqs) {
    update.num_proposed_tokens += seq.num_proposed_tokens;
    update.num_accepted_tokens += seq.num_accepted_tokens;
  }
  const uint64_t id = group.request_id;
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  swapped_.erase(std::remove(swapped_.begin(), swapped_.end(), id), swapped_.end());
  groups_.erase(id);  // `group` dangles from here on
}

void Scheduler::fail(SequenceGroup& group, FinishReason reason, std::string error) {
  for (Sequence& seq : group.seqs) {
    if (seq.finished()) continue;
    free_seq(seq);
    seq.finish_reason = reason;
  }
  RequestUpdate update = new_update(group);
  update.error = std::move(error);
  finish_group(group, update);
  pending_.push_back(std::move(update));
}

void Scheduler::abort(uint64_t request_id) {
  auto it = groups_.find(request_id);
  if (it != groups_.end()) fail(it->second, FinishReason::kAbort, {});
  flush_owned();
}

std::optional<RequestUpdate> Scheduler::stop_sequence(uint64_t request_id, int index,
                                                      int num_tokens) {
  auto it = groups_.find(request_id);
  if (it == groups_.end() || it->second.is_beam_search()) return std::nullopt;
  SequenceGroup& group = it->second;
  auto seq = std::find_if(group.seqs.begin(), group.seqs.end(),
                          [&](const Sequence& s) { return !s.finished() && s.index == index; });
  if (seq == group.seqs.end()) return std::nullopt;
  if (num_tokens >= 0 && static_cast<size_t>(num_tokens) < seq->output_token_ids.size() &&
      seq->output_logprobs.size() == seq->output_token_ids.size()) {
    for (size_t i = static_cast<size_t>(num_tokens); i < seq->output_logprobs.size(); ++i) {
      seq->cumulative_logprob -= seq->output_logprobs[i];
    }
    seq->output_token_ids.resize(static_cast<size_t>(num_tokens));
    seq->output_logprobs.resize(static_cast<size_t>(num_tokens));
  }
  free_seq(*seq);
  seq->finish_reason = FinishReason::kStop;
  if (group.num_live() != 0) {
    flush_owned();
    return std::nullopt;
  }
  RequestUpdate update = new_update(group);
  finish_group(group, update);
  flush_owned();
  return update;
}

}  // namespace pagedserve::actors
