// Scheduler: continuous batching with FCFS admission and preemption by recompute.
#include "actors/scheduler.h"

#include <algorithm>
#include <stdexcept>

namespace pagedserve::actors {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

int32_t SequenceState::token_at(int i) const {
  const int prompt_len = static_cast<int>(prompt_token_ids.size());
  return i < prompt_len ? prompt_token_ids[i] : output_token_ids[i - prompt_len];
}

Scheduler::Scheduler(const SchedulerConfig& config, const cache::BlockManagerConfig& blocks)
    : config_(config), blocks_(blocks) {}

void Scheduler::add(SequenceState seq) {
  const uint64_t id = seq.id;
  if (!seqs_.emplace(id, std::move(seq)).second) {
    throw std::logic_error("Scheduler::add: duplicate sequence id " + std::to_string(id));
  }
  waiting_.push_back(id);
}

bool Scheduler::has_unfinished() const { return !seqs_.empty() || !pending_.empty(); }

void Scheduler::abort(uint64_t id) {
  if (seqs_.count(id)) finish(id, FinishReason::kAbort);
}

void Scheduler::finish(uint64_t id, FinishReason reason, std::string error) {
  auto it = seqs_.find(id);
  SequenceUpdate update;
  update.id = id;
  update.finish_reason = reason;
  update.num_cached_tokens = std::max(it->second.num_cached_tokens, 0);
  update.error = std::move(error);
  pending_.push_back(std::move(update));
  if (blocks_.has_sequence(id)) blocks_.free(id);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  seqs_.erase(it);
}

void Scheduler::preempt(uint64_t id) {
  SequenceState& seq = seqs_.at(id);
  blocks_.free(id);
  seq.num_computed_tokens = 0;
  ++seq.num_preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.push_front(id);
}

// Every running sequence needs a slot for the token it sampled last step. Preempt from the
// newest until the rest fit, then reserve (collecting copy-on-write copies).
bool Scheduler::reserve_decode_slots(StepInput& step) {
  bool preempted = false;
  while (!running_.empty() && !blocks_.can_append_slots(static_cast<int>(running_.size()))) {
    preempt(running_.back());
    preempted = true;
  }
  for (uint64_t id : running_) {
    SequenceState& seq = seqs_.at(id);
    const int32_t token = seq.output_token_ids.back();
    std::vector<cache::BlockCopy> copies = blocks_.append_token(id, token);
    step.block_copies.insert(step.block_copies.end(), copies.begin(), copies.end());

    ScheduledSequence scheduled;
    scheduled.seq_id = id;
    scheduled.new_token_ids = {token};
    scheduled.num_computed_tokens = seq.num_computed_tokens;
    scheduled.sample = true;
    scheduled.sampling = seq.sampling;
    scheduled.seed = seq.seed;
    scheduled.sample_step = seq.output_token_ids.size();
    auto table = blocks_.block_table(id);
    scheduled.block_table.assign(table.begin(), table.end());
    step.seqs.push_back(std::move(scheduled));
  }
  return preempted;
}

void Scheduler::admit_waiting(StepInput& step, int& budget) {
  const int total_blocks = blocks_.num_total_device_blocks();
  while (!waiting_.empty() && running_.size() < static_cast<size_t>(config_.max_num_seqs)) {
    const uint64_t id = waiting_.front();
    SequenceState& seq = seqs_.at(id);
    std::vector<int32_t> tokens(seq.prompt_token_ids);
    tokens.insert(tokens.end(), seq.output_token_ids.begin(), seq.output_token_ids.end());

    if (blocks_.check_allocate(tokens) == cache::AllocStatus::kNever) {
      const int blocks_needed =
          (seq.num_tokens() + blocks_.block_size() - 1) / blocks_.block_size();
      finish(id, FinishReason::kError,
             "the sequence needs " + std::to_string(blocks_needed) +
                 " KV blocks but the pool can never give it that many (" +
                 std::to_string(total_blocks) + " blocks, " +
                 std::to_string(blocks_.watermark_blocks()) +
                 " kept back); raise --kv-cache-memory or --num-kv-blocks");
      continue;
    }
    // The first admission always fits the budget, so a prompt longer than the budget still runs.
    const bool batch_empty = step.seqs.empty();
    if (!batch_empty && seq.num_tokens() > budget) break;
    if (!blocks_.can_allocate(tokens)) break;

    const cache::AllocationResult allocation = blocks_.allocate(id, tokens);
    if (seq.num_cached_tokens < 0) seq.num_cached_tokens = allocation.num_cached_tokens;
    seq.num_computed_tokens = allocation.num_cached_tokens;
    waiting_.pop_front();
    running_.push_back(id);

    ScheduledSequence scheduled;
    scheduled.seq_id = id;
    scheduled.new_token_ids.assign(tokens.begin() + allocation.num_cached_tokens, tokens.end());
    scheduled.num_computed_tokens = allocation.num_cached_tokens;
    scheduled.sample = true;
    scheduled.sampling = seq.sampling;
    scheduled.seed = seq.seed;
    scheduled.sample_step = seq.output_token_ids.size();
    auto table = blocks_.block_table(id);
    scheduled.block_table.assign(table.begin(), table.end());
    budget -= static_cast<int>(scheduled.new_token_ids.size());
    step.seqs.push_back(std::move(scheduled));
  }
}

StepInput Scheduler::schedule() {
  StepInput step;
  step.step_id = next_step_id_++;
  int budget = config_.max_num_batched_tokens - static_cast<int>(running_.size());
  const bool preempted = reserve_decode_slots(step);
  // After a preemption the pool is full: admitting now would only thrash.
  if (!preempted) admit_waiting(step, budget);
  return step;
}

FinishReason Scheduler::check_stop(const SequenceState& seq) const {
  const int32_t last = seq.output_token_ids.back();
  const int num_out = static_cast<int>(seq.output_token_ids.size());
  if (num_out > seq.sampling.min_tokens) {
    const auto& stops = seq.sampling.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), last) != stops.end()) return FinishReason::kStop;
    if (!seq.sampling.ignore_eos &&
        std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), last) !=
            config_.eos_token_ids.end()) {
      return FinishReason::kStop;
    }
  }
  if (num_out >= seq.sampling.max_tokens) return FinishReason::kLength;
  if (seq.num_tokens() >= config_.max_model_len) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::vector<SequenceUpdate> Scheduler::update(const StepInput& input, const StepOutput& output) {
  // Sequences finished outside a step (aborts, errors found by schedule()) report first.
  std::vector<SequenceUpdate> updates = std::move(pending_);
  pending_.clear();
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& scheduled = input.seqs[i];
    auto it = seqs_.find(scheduled.seq_id);
    if (it == seqs_.end()) continue;  // aborted while the step ran
    SequenceState& seq = it->second;
    seq.num_computed_tokens =
        scheduled.num_computed_tokens + static_cast<int>(scheduled.new_token_ids.size());
    if (!scheduled.sample) continue;

    const int32_t token = output.sampled_token_ids.at(i);
    seq.output_token_ids.push_back(token);
    SequenceUpdate update;
    update.id = seq.id;
    update.new_token_id = token;
    update.num_cached_tokens = std::max(seq.num_cached_tokens, 0);
    update.finish_reason = check_stop(seq);
    if (update.finished()) {
      blocks_.free(seq.id);
      running_.erase(std::remove(running_.begin(), running_.end(), seq.id), running_.end());
      seqs_.erase(it);
    }
    updates.push_back(std::move(update));
  }
  return updates;
}

}  // namespace pagedserve::actors
