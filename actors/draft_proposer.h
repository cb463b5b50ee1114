// DraftProposer: speculative decoding's draft model, on the CPU executor. A small model with the
// target's vocabulary proposes each speculating sequence's next tokens greedily, one batched
// forward pass per proposed position, just before the target's step verifies them.
//
// Its K/V live in a paged cache of their own shaped for the draft but indexed by the target's
// block ids: every block id of the target's pool has a draft twin. So the draft needs no block
// manager of its own, and what happens to the target's blocks happens to the draft's: the step's
// swap-outs, swap-ins and copy-on-write copies are applied to both pools (copy_blocks), a fork
// shares them, a truncated proposal's slots go back with the target's. The scheduler tracks how
// far the draft's K/V reach in each sequence (draft_num_computed_tokens) and hands the draft the
// tokens it has not seen (draft_context_ids): the prompt on a sequence's first proposal, the
// whole sequence after a recompute, or the last accepted proposal after a fully accepted step.
//
// A greedy request gets the draft's greedy proposals, a point mass: verification accepts a
// draw equal to the proposal, and the output is token for token the target's alone. A sampled
// request gets proposals drawn from the draft's distribution q under the request's
// temperature and filters, on a stream of its own; verification applies the standard
// rejection rule to them (sample_rows.h), so the output is distributed as the target's.
// Lives on the executor thread; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/step_messages.h"
#include "kernels/cpu/thread_pool.h"
#include "model/llama_model.h"
#include "model/paged_kv_cache.h"

namespace pagedserve::actors {

class DraftProposer {
 public:
  // num_device_blocks / num_cpu_blocks: the target's pools' (the draft's twins); pool: the
  // executor's kernel threads (not owned).
  DraftProposer(const model::LlamaCheckpoint& checkpoint, int block_size, int num_device_blocks,
                int num_cpu_blocks, kernels::ThreadPool* pool, kernels::KvDtype kv_dtype);

  const model::ModelConfig& config() const { return model_.config(); }

  // The step's swap-outs, swap-ins and copy-on-write copies, in StepInput's order.
  void copy_blocks(const StepInput& input);

  // Fills the kProposalSlotToken slots of every row that has them (the last
  // num_proposed_tokens of new_token_ids) with the draft's proposals (and draft_probs for
  // sampled rows), writing the draft's K/V of draft_context_ids, the row's last token and all
  // proposals but the last. Returns whether any row had them.
  bool propose(std::vector<ScheduledSequence>& seqs);

 private:
  model::LlamaModel model_;
  model::PagedKvCache device_cache_;
  model::PagedKvCache cpu_cache_;
  model::LlamaModel::Workspace workspace_;  // reused every step
  std::vector<float> scratch_;              // a row with its banned tokens removed
  std::vector<float> q_;                    // a row's distribution
};

}  // namespace pagedserve::actors
