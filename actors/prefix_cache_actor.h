// PrefixCacheActor: owns the KV allocator (for paged: the BlockManager with its prefix cache
// and swap space) on its own thread, so the scheduler reaches KV memory only by message.
// Handles ApplyMemoryOps (from the scheduler actor): applies the op list in order with
// KvMemoryApplier (cache/kv_memory_ops.h), hashing and looking up prompt prefixes as it goes,
// and answers with one MemoryOpsApplied on the scheduler's reply channel. A thin shell: every
// decision is the allocator's or the scheduler's. A request with `reset` set replaces the
// allocator by a fresh one (every block free, the prefix cache empty): how the engine recovers
// after the allocator refused a list or a step's KV contents were lost (docs/actors.md,
// "Failures"). Lives on the prefix-cache ActorThread.
// KV-cache events: with a publisher, the allocator records its prefix-cache changes and the
// actor hands them on after each list as one batch (a reset adds the removal of every cached
// hash and AllBlocksCleared); without one nothing is recorded.
#pragma once

#include <functional>
#include <memory>

#include "actors/fault_hooks.h"
#include "actors/kv_event_publisher.h"
#include "actors/runtime/channel.h"
#include "actors/runtime/prefix_cache_messages.h"
#include "cache/kv_allocator.h"

namespace pagedserve::actors {

class PrefixCacheActor {
 public:
  // Builds an empty allocator: once at construction, again for each reset request.
  using AllocatorFactory = std::function<std::unique_ptr<cache::KvAllocator>()>;

  // `faults`: test-only hooks (null in programs); must outlive the actor. `events`: where
  // KV-cache event batches go (null: none are recorded).
  PrefixCacheActor(AllocatorFactory make_allocator,
                   runtime::Channel<runtime::ApplyMemoryOps>& inbox,
                   runtime::Channel<runtime::MemoryOpsApplied>& reply,
                   const FaultHooks* faults = nullptr,
                   std::shared_ptr<KvEventPublisher> events = nullptr);

  // The run loop; spawn it on the prefix-cache thread. Ends when the inbox or the reply
  // channel closes.
  runtime::Task<void> run();

  // The answer to one request (the run loop's work; also what tests call without a thread).
  runtime::MemoryOpsApplied on_apply(runtime::ApplyMemoryOps request);

  // Only once the run loop has ended (its thread joined), or from its thread.
  const cache::KvAllocator& allocator() const { return *allocator_; }

 private:
  // make_allocator_'s allocator, with the event recorder attached when events are on.
  std::unique_ptr<cache::KvAllocator> make_allocator();
  // Hands what the recorder holds to the publisher as one batch (nothing when it is empty).
  void publish_events();

  AllocatorFactory make_allocator_;
  const FaultHooks* faults_ = nullptr;
  std::shared_ptr<KvEventPublisher> events_;
  cache::KvEventRecorder recorder_;  // attached to allocator_ only when events_ is set
  std::unique_ptr<cache::KvAllocator> allocator_;
  runtime::Channel<runtime::ApplyMemoryOps>& inbox_;
  runtime::Channel<runtime::MemoryOpsApplied>& reply_;
};

}  // namespace pagedserve::actors
