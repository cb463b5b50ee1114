// The small value types shared by the block pool, the block manager and its callers (the
// scheduler and the executor): ids, the manager's configuration, and the results it returns.
#pragma once

#include <cstdint>

namespace pagedserve::cache {

using SeqId = uint64_t;
using BlockId = int32_t;  // index into one pool (device or CPU); each pool numbers from 0

struct BlockManagerConfig {
  int block_size = 16;        // tokens per block
  int num_device_blocks = 0;  // blocks in the executor's KV pool
  int num_cpu_blocks = 0;     // blocks in the CPU swap pool
  bool enable_prefix_caching = true;
  double watermark = 0.01;  // fraction of device blocks admission keeps free
  // Tokens every layer's sliding window covers (ModelConfig::max_window_of_all_layers()); 0
  // when some layer reads the whole context. When > 0, BlockManager::release_blocks_before_window
  // gives back the blocks no query can read any more.
  int sliding_window = 0;
  // reserve-* allocators only: regions of a power of two of blocks, aligned (buddy allocation,
  // as the PagedAttention paper's Orca baselines); off: exact-size first-fit regions.
  bool buddy_regions = false;
};

// A copy of one block's K/V (all layers) that the executor must perform before the step runs.
// Copies must run in the order the manager returned them (see BlockManager's class comment).
struct BlockCopy {
  BlockId src = 0;
  BlockId dst = 0;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct AllocationResult {
  int num_cached_tokens = 0;  // prompt tokens whose K/V were found in the prefix cache
};

// Whether a prompt can be admitted: now, after other sequences free blocks, or never (it needs
// more blocks than the pool has beyond the watermark).
enum class AllocStatus { kOk, kLater, kNever };

}  // namespace pagedserve::cache
