// Scheduler: the pure policy of iteration-level (continuous) batching. Every step the running
// sequences continue and waiting ones are admitted first-come-first-served while KV blocks,
// max_num_seqs and the token budget allow; when blocks run out, the most recently admitted
// sequence is preempted by recompute (its blocks freed, its prompt and output recomputed when
// it is readmitted). No I/O, no threads: the engine (and later the scheduler actor) drives it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "actors/step_messages.h"
#include "cache/block_manager.h"
#include "model/sampling_params.h"

namespace pagedserve::actors {

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

struct SequenceState {
  uint64_t id = 0;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  model::SamplingParams sampling;
  uint64_t seed = 0;
  int num_computed_tokens = 0;  // tokens whose K/V are in the cache
  int num_cached_tokens = -1;   // prompt tokens the prefix cache served at first admission
  int num_preemptions = 0;

  int num_tokens() const {
    return static_cast<int>(prompt_token_ids.size() + output_token_ids.size());
  }
  int32_t token_at(int i) const;
};

// What one step did to one sequence.
struct SequenceUpdate {
  uint64_t id = 0;
  int32_t new_token_id = -1;  // -1 when the step sampled nothing for it
  FinishReason finish_reason = FinishReason::kNone;
  int num_cached_tokens = 0;
  std::string error;  // set when finish_reason is kError

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_model_len = 2048;
  int max_num_batched_tokens = 8192;
  std::vector<int32_t> eos_token_ids;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, const cache::BlockManagerConfig& blocks);

  void add(SequenceState seq);
  // Frees the sequence's blocks at once; the update comes out of the next schedule().
  void abort(uint64_t id);
  bool has_unfinished() const;

  // Decides the next step. Sequences that can never run (e.g. a prompt larger than the whole
  // KV pool) are finished with an error and reported by the next update().
  StepInput schedule();
  // Applies the executor's output for the step schedule() returned.
  std::vector<SequenceUpdate> update(const StepInput& input, const StepOutput& output);

  const cache::BlockManager& block_manager() const { return blocks_; }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }

 private:
  bool reserve_decode_slots(StepInput& step);
  void admit_waiting(StepInput& step, int& budget);
  void preempt(uint64_t id);
  void finish(uint64_t id, FinishReason reason, std::string error = {});
  FinishReason check_stop(const SequenceState& seq) const;

  SchedulerConfig config_;
  cache::BlockManager blocks_;
  std::map<uint64_t, SequenceState> seqs_;
  std::deque<uint64_t> waiting_;         // FCFS; preempted sequences go back to the front
  std::vector<uint64_t> running_;        // in admission order; the last is preempted first
  std::vector<SequenceUpdate> pending_;  // finished outside a step (abort, error)
  uint64_t next_step_id_ = 0;
};

}  // namespace pagedserve::actors
