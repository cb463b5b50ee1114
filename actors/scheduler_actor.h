// SchedulerActor: owns the pure Scheduler (actors/scheduler.h) and drives the step loop (with
// overlap: up to two steps outstanding, the next planned while one runs): handles AddRequest
// (from the tokenizer actor), CheckAborts (a wake-up after a client cancelled) and StepDone
// (from the executor actor); sends ApplyMemoryOps to the prefix-cache actor, ExecuteStep to the
// executor actor and DecodeBatch to the tokenizer actor. Lives on the scheduler ActorThread (one
// run loop, so no lock on its state).
//
// KV memory is the PrefixCacheActor's (actors/prefix_cache_actor.h): it owns the KvAllocator
// (the BlockManager with its prefix cache, or a reserve-* allocator). The Scheduler runs in
// KvMemoryPlacement::kRemote: it plans each step from its own view of memory (a PagedKvMirror:
// per sequence the tables and tokens held, per block how many tables hold it, and the free
// device/CPU blocks of the last reply; for reserve-* a replica, see scheduler.h), and emits one
// ordered memory-op list for the step (cache/kv_memory_ops.h: the forks, frees and pending-token
// resolutions update() produced since the last list, then swap_out*, swap_in*, allocate with a
// prefix lookup, append / append_pending). Per step this actor sends one ApplyMemoryOps, awaits
// the one MemoryOpsApplied (copy lists, prefix hits per new sequence, tables, pool snapshot),
// completes the step from it (Scheduler::finish_step) and only then sends ExecuteStep. With
// overlap the round trip happens while the executor runs the step before. Ops queued with no
// step to carry them (frees after the last request ends, an abort with overlap off) go alone;
// the last of them when the inbox closes. Metrics (EngineStats) come from the reply's snapshot.
// A fault (the prefix-cache actor refusing a list, a step the executor failed or that could not
// be sent to it) ends the requests holding KV memory with finish reason "error", carries the
// ones still queued over to a fresh Scheduler and has the allocator start over empty.
// Design and trade-offs: docs/actors.md.
//
// Only scheduler_actor.cpp sees the Scheduler's step types (RequestUpdate, ...), so they can
// change without touching the rest of the actor system.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/fault_hooks.h"
#include "actors/runtime/channel.h"
#include "actors/runtime/executor_messages.h"
#include "actors/runtime/prefix_cache_messages.h"
#include "actors/runtime/scheduler_messages.h"
#include "actors/runtime/stats_board.h"
#include "actors/runtime/tokenizer_messages.h"
#include "actors/scheduler.h"

namespace pagedserve::actors {

struct SchedulerActorConfig {
  SchedulerConfig scheduler;
  cache::BlockManagerConfig blocks;
  bool overlap = true;  // see EngineOptions::overlap
};

// The scheduler's two channels to the prefix-cache actor: requests out, replies back (bound to
// the scheduler's thread). One request is outstanding at a time, so capacity 1 each suffices.
struct PrefixCacheLink {
  runtime::Channel<runtime::ApplyMemoryOps>& inbox;
  runtime::Channel<runtime::MemoryOpsApplied>& reply;
};

class SchedulerActor {
 public:
  SchedulerActor(const SchedulerActorConfig& config,
                 runtime::Channel<runtime::SchedulerMessage>& inbox,
                 runtime::Channel<runtime::ExecuteStep>& executor_inbox,
                 runtime::Channel<runtime::DecodeBatch>& tokenizer_inbox,
                 PrefixCacheLink prefix_cache, runtime::StatsBoard& stats,
                 const FaultHooks* faults = nullptr);
  ~SchedulerActor();

  // The run loop; spawn it on the scheduler thread. Ends when the inbox closes.
  runtime::Task<void> run();
  // Any thread, never blocks: some request's stop token fired.
  void notify_abort();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace pagedserve::actors
