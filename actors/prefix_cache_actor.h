// PrefixCacheActor: owns the KV allocator (for paged: the BlockManager with its prefix cache
// and swap space) on its own thread, so the scheduler reaches KV memory only by message.
// Handles ApplyMemoryOps (from the scheduler actor): applies the op list in order with
// KvMemoryApplier (cache/kv_memory_ops.h), hashing and looking up prompt prefixes as it goes,
// and answers with one MemoryOpsApplied on the scheduler's reply channel. A thin shell: every
// decision is the allocator's or the scheduler's. A request with `reset` set replaces the
// allocator by a fresh one (every block free, the prefix cache empty): how the engine recovers
// after the allocator refused a list or a step's KV contents were lost (docs/actors.md,
// "Failures"). Lives on the prefix-cache ActorThread.
#pragma once

#include <functional>
#include <memory>

#include "actors/fault_hooks.h"
#include "actors/runtime/channel.h"
#include "actors/runtime/prefix_cache_messages.h"
#include "cache/kv_allocator.h"

namespace pagedserve::actors {

class PrefixCacheActor {
 public:
  // Builds an empty allocator: once at construction, again for each reset request.
  using AllocatorFactory = std::function<std::unique_ptr<cache::KvAllocator>()>;

  // `faults`: test-only hooks (null in programs); must outlive the actor.
  PrefixCacheActor(AllocatorFactory make_allocator,
                   runtime::Channel<runtime::ApplyMemoryOps>& inbox,
                   runtime::Channel<runtime::MemoryOpsApplied>& reply,
                   const FaultHooks* faults = nullptr);

  // The run loop; spawn it on the prefix-cache thread. Ends when the inbox or the reply
  // channel closes.
  runtime::Task<void> run();

  // The answer to one request (the run loop's work; also what tests call without a thread).
  runtime::MemoryOpsApplied on_apply(runtime::ApplyMemoryOps request);

  // Only once the run loop has ended (its thread joined), or from its thread.
  const cache::KvAllocator& allocator() const { return *allocator_; }

 private:
  AllocatorFactory make_allocator_;
  std::unique_ptr<cache::KvAllocator> allocator_;
  const FaultHooks* faults_ = nullptr;
  runtime::Channel<runtime::ApplyMemoryOps>& inbox_;
  runtime::Channel<runtime::MemoryOpsApplied>& reply_;
};

}  // namespace pagedserve::actors
