// The block copies a step starts with (StepInput's swap-outs, swap-ins and copy-on-write
// copies), applied to a device pool and its CPU swap pool: the target's, and a draft model's
// twin pools (actors/draft_proposer.h), which follow the same block ids.
#pragma once

#include "actors/step_messages.h"
#include "model/paged_kv_cache.h"

namespace pagedserve::actors {

inline void apply_step_copies(const StepInput& input, model::PagedKvCache& device,
                              model::PagedKvCache& cpu) {
  // Swap-out first: the blocks it frees may be the destinations of this step's swap-ins.
  for (const cache::BlockCopy& copy : input.swap_out) device.copy_block_to(copy.src, cpu, copy.dst);
  for (const cache::BlockCopy& copy : input.swap_in) cpu.copy_block_to(copy.src, device, copy.dst);
  for (const cache::BlockCopy& copy : input.block_copies) device.copy_block(copy.src, copy.dst);
}

}  // namespace pagedserve::actors
