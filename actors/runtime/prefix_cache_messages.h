// Messages between the scheduler actor and the prefix-cache actor: one ApplyMemoryOps per step
// (or per batch of frees when no step follows), answered by one MemoryOpsApplied on the
// scheduler's reply channel. Movable values that own their data.
#pragma once

#include <cstdint>
#include <string>

#include "cache/kv_memory_ops.h"

namespace pagedserve::actors::runtime {

// The memory ops of one step (cache/kv_memory_ops.h), in the order the scheduler decided them.
struct ApplyMemoryOps {
  uint64_t request_id = 0;  // echoed in the reply: the scheduler checks it got its own answer
  cache::KvMemoryOps ops;
  // Replace the allocator by an empty one before applying `ops` (the scheduler recovers from a
  // failure by starting KV memory over: docs/actors.md, "Failures").
  bool reset = false;
};

struct MemoryOpsApplied {
  uint64_t request_id = 0;
  cache::KvMemoryResult result;
  // Set when the allocator refused an op: the scheduler's view of memory disagreed with it (a
  // bug). The result then holds what the ops before it did.
  std::string error;
};

}  // namespace pagedserve::actors::runtime
