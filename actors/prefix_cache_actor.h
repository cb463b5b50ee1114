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
//
// Observers (the playground's block map): while a KvMapBoard has subscribers, a second loop on
// the same thread (publish_kv_maps) reads the paged allocator's BlockManager::snapshot() at
// most every kKvMapInterval, when memory ops changed it since the last one, and publishes it
// with the sequence -> request map learnt from the ops (cache::KvSeqRequests). The scheduler
// never waits for it: a snapshot happens between two op lists, on this thread.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "actors/fault_hooks.h"
#include "actors/kv_event_publisher.h"
#include "actors/runtime/channel.h"
#include "actors/runtime/kv_map_board.h"
#include "actors/runtime/prefix_cache_messages.h"
#include "cache/kv_allocator.h"
#include "cache/kv_snapshot.h"

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

  // Observers: at most one block map per interval, only while `board` has subscribers.
  static constexpr std::chrono::milliseconds kKvMapInterval{100};
  // Before run(); `board` must outlive the actor. Then spawn publish_kv_maps() on the same thread.
  void set_kv_map_board(runtime::KvMapBoard* board) { kv_board_ = board; }
  // Ends when run() ends.
  runtime::Task<void> publish_kv_maps();
  // Publishes a map now if one is wanted and memory changed since the last (the loop's work;
  // tests call it without a thread). Returns whether it published.
  bool publish_kv_map_if_wanted();

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
  runtime::KvMapBoard* kv_board_ = nullptr;
  cache::KvSeqRequests seq_requests_;
  uint64_t num_changes_ = 0;  // op lists applied (and resets)
  uint64_t num_changes_published_ = 0;
  uint64_t kv_map_version_ = 0;
  bool stopped_ = false;                           // run() ended
  boost::asio::steady_timer* kv_timer_ = nullptr;  // publish_kv_maps' timer while it waits
  runtime::Channel<runtime::ApplyMemoryOps>& inbox_;
  runtime::Channel<runtime::MemoryOpsApplied>& reply_;
};

}  // namespace pagedserve::actors
