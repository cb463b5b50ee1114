// SchedulerActor: owns the pure Scheduler (actors/scheduler.h) and, through it, the KV block
// manager with its prefix cache, and drives the step loop (with overlap: up to two steps
// outstanding, the next planned while one runs): handles AddRequest (from the
// tokenizer actor), CheckAborts (a wake-up after a client cancelled) and StepDone (from the
// executor actor); sends ExecuteStep to the executor actor and DecodeBatch to the tokenizer
// actor. Lives on the scheduler ActorThread (one run loop, so no lock on its state).
//
// The issue asks for a separate prefix-cache actor owning the block manager. It is not done
// yet; the BlockManager still lives inside the pure Scheduler, on this thread. Why, and what
// is left: Scheduler::schedule() asks the BlockManager synchronous questions while it plans
// (has_sequence, cached_prefix_tokens for a prompt's hits, block_table + device_ref_count for
// copy-on-write, num_free_device_blocks / watermark, cpu_block_table for swap-in, free CPU
// blocks for swap-vs-recompute, check_allocate for "can never run") and carries each decision
// out at once (allocate, append_token / append_pending_token, swap_out, swap_in, free);
// update() forks, frees and resolves pending tokens. One round trip per call would put two
// channel hops per sequence per step on the critical path. The split that works:
//  1. The Scheduler keeps a mirror per sequence (tokens and blocks held, whether its last
//     block may be shared) and plans from it plus a snapshot of free device/CPU blocks, with
//     the upper bounds the plan already uses (Budget::planned_blocks). Prefix hits are not
//     known while planning: a new prompt is planned from token 0 and the reply says how many
//     tokens the cache served (the step then computes fewer; ScheduledSequence is filled in
//     from the reply).
//  2. One StepMemoryRequest per step: the ordered ops (swap_out*, swap_in*, allocate with
//     prefix lookup and salt, append / append_pending, plus the forks, frees and pending-token
//     resolutions update() produced since the last request). One reply: block tables, the
//     three copy lists, hits per new sequence, and the free-block snapshot for the next plan.
//  3. A PrefixCacheActor (thin shell, own thread) that applies the ops in order to the
//     BlockManager (which stays a pure class, tested synchronously) and hashes prompts.
//  4. The scheduler actor awaits the reply, then sends ExecuteStep; with overlap scheduling
//     (done, see scheduler.h) the round trip happens while the executor runs the step before.
//  5. scheduler_test's FakeExecutor harness driven through the request/reply messages.
//
// Only scheduler_actor.cpp sees the Scheduler's step types (RequestUpdate, ...), so they can
// change without touching the rest of the actor system.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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
                 PrefixCacheLink prefix_cache, runtime::StatsBoard& stats);
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
