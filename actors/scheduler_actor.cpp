// SchedulerActor: the step loop around the pure Scheduler. The one place in the actor system
// that uses the Scheduler's own types; everything it sends out is a runtime message.
//
// Overlap (EngineOptions::overlap): as soon as step N is handed to the executor, the actor
// plans step N+1 with the Scheduler's overlap protocol (placeholders for N's samples, see
// scheduler.h) and queues it behind N, so the executor goes from N straight to N+1. When N's
// result arrives the actor applies it, plans N+2 and queues it, forwards N's tokens to the
// tokenizer and handles arrivals and aborts, all while the executor computes N+1. At most two
// steps are outstanding. When N's outcome decides the next plan (a prompt forking into best_of
// children, a beam search step) Scheduler::can_schedule() is false and the actor waits for N,
// as the synchronous loop does. With overlap off it runs one step at a time and, before
// planning the next, waits until the last step's tokens reached the clients.
#include "actors/scheduler_actor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>

#include "actors/scheduler.h"

namespace pagedserve::actors {

namespace {

SchedulerConfig remote_config(SchedulerConfig config) {
  config.kv_placement = KvMemoryPlacement::kRemote;  // the prefix-cache actor owns the memory
  return config;
}

}  // namespace

struct SchedulerActor::State {
  State(const SchedulerActorConfig& config, runtime::Channel<runtime::SchedulerMessage>& inbox,
        runtime::Channel<runtime::ExecuteStep>& executor_inbox,
        runtime::Channel<runtime::DecodeBatch>& tokenizer_inbox, PrefixCacheLink prefix_cache,
        runtime::StatsBoard& stats, const FaultHooks* faults);

  runtime::Task<void> run();
  void on_message(runtime::AddRequest& add);
  void on_message(runtime::CheckAborts& check);
  void on_message(runtime::StepDone& done);
  void sweep_aborts();
  // Schedules and launches steps while fewer than the limit are outstanding (1, or 2 with
  // overlap) and the Scheduler allows; flushes steps with nothing to run.
  runtime::Task<void> launch_steps(bool continues_previous_step);
  // launch_steps, then, while a fault is pending, recovery and launch_steps again (for the
  // requests carried over).
  runtime::Task<void> launch_steps_and_recover(bool continues_previous_step);
  // One round trip to the prefix-cache actor; nullopt when it is gone (shutdown) or failed
  // (then `fault` says why). `reset`: the allocator starts over empty first.
  runtime::Task<std::optional<cache::KvMemoryResult>> apply_memory_ops(cache::KvMemoryOps ops,
                                                                       bool reset = false);
  // Sends the frees, forks and resolutions no step carried (e.g. after the last request ended).
  runtime::Task<void> flush_memory_ops();
  void collect(std::vector<RequestUpdate> updates);
  // After a fault (`fault` set: the prefix-cache actor refused an op list, a step failed in
  // the executor or could not be sent to it) neither the Scheduler's view of KV memory nor the
  // KV contents are trusted. Ends every request that holds (or was being given) KV memory
  // with an error, carries the ones still waiting for their first admission over to a fresh
  // Scheduler, and has the prefix-cache actor start over with an empty allocator (which
  // also drops prefix-cache entries whose blocks may never have been written). Steps still in
  // flight belong to the old Scheduler: their results are discarded. docs/actors.md,
  // "Failures".
  runtime::Task<void> recover_from_fault();
  // Whether a live request can move to a fresh Scheduler unharmed: it holds no KV memory and
  // has produced nothing yet, and was not carried over before (a second fault ends it, so
  // recovery cannot loop).
  bool can_carry_over(uint64_t request_id) const;
  // Queues the final delta of a request that ends outside any step (never scheduled, or
  // failed with the engine); `error` empty for an abort.
  void end_request(uint64_t request_id, const char* finish_reason, std::string error);
  void publish_stats();
  // Sends the collected deltas to the tokenizer; with wait_for_delivery, until they reached
  // the clients' streams (overlap off).
  runtime::Task<void> forward_deltas(bool wait_for_delivery);

  const SchedulerActorConfig config;
  std::unique_ptr<Scheduler> scheduler;  // replaced by recover_from_fault()
  runtime::Channel<runtime::SchedulerMessage>& inbox;
  runtime::Channel<runtime::ExecuteStep>& executor_inbox;
  runtime::Channel<runtime::DecodeBatch>& tokenizer_inbox;
  PrefixCacheLink prefix_cache;
  runtime::StatsBoard& stats;
  const FaultHooks* faults = nullptr;  // tests only
  uint64_t next_memory_request_id = 1;

  struct LiveRequest {
    std::stop_token cancel;
    bool streamed = false;      // some token went out (beam search streams none before the end)
    bool carried_over = false;  // moved to a fresh Scheduler by recover_from_fault() once
  };
  std::unordered_map<uint64_t, LiveRequest> live;  // added and not yet reported finished
  std::vector<runtime::OutputDelta> outbox;
  std::string fault;          // a failure recover_from_fault() has not handled yet
  int steps_outstanding = 0;  // sent to the executor, StepDone not received yet
  // Of those, steps of a Scheduler that recover_from_fault() replaced: the executor answers in
  // order, so the next this many StepDones are theirs, and are dropped.
  int stale_steps_outstanding = 0;
  // What replaced Schedulers counted, so EngineStats' counters never go back.
  SchedulerStats retired_stats;
  int64_t retired_prefix_queries_tokens = 0;
  int64_t retired_prefix_hits_tokens = 0;
  std::atomic<bool> abort_pending{false};  // set by any thread, cleared by this one
  const uint64_t seed_state = std::random_device{}();
  int64_t num_generated_tokens = 0;
};

SchedulerActor::State::State(const SchedulerActorConfig& config_in,
                             runtime::Channel<runtime::SchedulerMessage>& inbox_in,
                             runtime::Channel<runtime::ExecuteStep>& executor_inbox_in,
                             runtime::Channel<runtime::DecodeBatch>& tokenizer_inbox_in,
                             PrefixCacheLink prefix_cache_in, runtime::StatsBoard& stats_in,
                             const FaultHooks* faults_in)
    : config(config_in),
      scheduler(std::make_unique<Scheduler>(remote_config(config_in.scheduler), config_in.blocks)),
      inbox(inbox_in),
      executor_inbox(executor_inbox_in),
      tokenizer_inbox(tokenizer_inbox_in),
      prefix_cache(prefix_cache_in),
      stats(stats_in),
      faults(faults_in) {
  publish_stats();
}

SchedulerActor::SchedulerActor(const SchedulerActorConfig& config,
                               runtime::Channel<runtime::SchedulerMessage>& inbox,
                               runtime::Channel<runtime::ExecuteStep>& executor_inbox,
                               runtime::Channel<runtime::DecodeBatch>& tokenizer_inbox,
                               PrefixCacheLink prefix_cache, runtime::StatsBoard& stats,
                               const FaultHooks* faults)
    : state_(std::make_unique<State>(config, inbox, executor_inbox, tokenizer_inbox, prefix_cache,
                                     stats, faults)) {}

SchedulerActor::~SchedulerActor() = default;

runtime::Task<void> SchedulerActor::run() { return state_->run(); }

void SchedulerActor::notify_abort() {
  state_->abort_pending.store(true);
  // A full inbox needs no wake-up: the flag is checked after every message.
  (void)state_->inbox.try_send(boost::system::error_code{},
                               runtime::SchedulerMessage(runtime::CheckAborts{}));
}

runtime::Task<void> SchedulerActor::State::run() {
  for (;;) {
    auto [error, message] = co_await inbox.async_receive(runtime::kAwaitTuple);
    if (error) break;  // closed: shutdown
    const bool step_finished = std::holds_alternative<runtime::StepDone>(message);
    try {
      std::visit([this](auto& m) { on_message(m); }, message);
      if (abort_pending.exchange(false)) sweep_aborts();
    } catch (const std::exception& e) {
      // A Scheduler precondition failed: a bug. Keep serving the other requests.
      std::fprintf(stderr, "pagedserve: scheduler actor: %s\n", e.what());
    }
    if (config.overlap) {
      co_await launch_steps_and_recover(step_finished);
    } else {
      // Overlap off: what an update or abort freed is free (and published) before the tokens
      // that report it reach the client.
      co_await flush_memory_ops();
      if (!fault.empty()) co_await recover_from_fault();
    }
    publish_stats();
    co_await forward_deltas(!config.overlap);
    if (!config.overlap) {
      co_await launch_steps_and_recover(step_finished);
      publish_stats();
      co_await forward_deltas(true);
    }
  }
  // Closed: hand the allocator the frees still queued, so it ends with what the requests left.
  co_await flush_memory_ops();
  publish_stats();
}

runtime::Task<std::optional<cache::KvMemoryResult>> SchedulerActor::State::apply_memory_ops(
    cache::KvMemoryOps ops, bool reset) {
  runtime::ApplyMemoryOps request;
  request.request_id = next_memory_request_id++;
  request.ops = std::move(ops);
  request.reset = reset;
  const uint64_t id = request.request_id;
  // Only this actor sends here and it awaits every reply, so the channel always has room.
  auto [send_error] = co_await prefix_cache.inbox.async_send(
      boost::system::error_code{}, std::move(request), runtime::kAwaitTuple);
  if (send_error) co_return std::nullopt;
  auto [receive_error, reply] = co_await prefix_cache.reply.async_receive(runtime::kAwaitTuple);
  if (receive_error) co_return std::nullopt;
  if (reply.request_id != id || !reply.error.empty()) {
    if (fault.empty()) {
      fault = reply.error.empty() ? "a KV memory reply arrived out of order"
                                  : "KV memory: " + reply.error;
    }
    co_return std::nullopt;
  }
  co_return std::move(reply.result);
}

runtime::Task<void> SchedulerActor::State::flush_memory_ops() {
  // With a fault pending the allocator is about to start over: the old Scheduler's ops are moot.
  if (!fault.empty() || !scheduler->has_memory_ops()) co_return;
  std::optional<cache::KvMemoryResult> result =
      co_await apply_memory_ops(scheduler->take_memory_ops());
  if (!result) co_return;
  try {
    scheduler->absorb_memory_result(*result);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagedserve: scheduler actor: %s\n", e.what());
  }
}

bool SchedulerActor::State::can_carry_over(uint64_t request_id) const {
  const auto it = live.find(request_id);
  const SequenceGroup* group = scheduler->group(request_id);
  if (it == live.end() || group == nullptr) return false;
  if (it->second.streamed || it->second.carried_over) return false;
  return group->status == GroupStatus::kWaiting && group->num_preemptions == 0 &&
         std::all_of(group->seqs.begin(), group->seqs.end(), [](const Sequence& seq) {
           return seq.output_token_ids.empty() && seq.num_computed_tokens == 0;
         });
}

runtime::Task<void> SchedulerActor::State::recover_from_fault() {
  const std::string reason = std::exchange(fault, {});
  std::fprintf(stderr,
               "pagedserve: scheduler actor: %s; failing the requests that hold KV memory and "
               "starting KV memory over\n",
               reason.c_str());
  auto fresh = std::make_unique<Scheduler>(remote_config(config.scheduler), config.blocks);
  fresh->continue_ids_after(*scheduler);
  // Ascending ids are arrival order, so the fresh queue keeps first-come-first-served.
  std::vector<uint64_t> ids;
  for (const auto& [id, request] : live) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    LiveRequest& request = live.at(id);
    if (request.cancel.stop_requested()) {
      end_request(id, "abort", {});
    } else if (can_carry_over(id)) {
      const SequenceGroup& group = *scheduler->group(id);
      NewRequest again;
      again.id = id;
      again.prompt_token_ids = group.prompt_token_ids;
      again.sampling = group.sampling;
      again.seed = group.seed;
      again.output_len_hint = group.output_len_hint;
      fresh->add(std::move(again));
      request.carried_over = true;
      continue;
    } else {
      end_request(id, "error", "engine failure: " + reason);
    }
    live.erase(id);
  }
  const SchedulerStats old = scheduler->stats();
  retired_stats.num_preemptions_swap += old.num_preemptions_swap;
  retired_stats.num_preemptions_recompute += old.num_preemptions_recompute;
  retired_stats.num_steps_planned_ahead += old.num_steps_planned_ahead;
  retired_stats.num_spec_rows += old.num_spec_rows;
  retired_stats.num_spec_proposed_tokens += old.num_spec_proposed_tokens;
  retired_stats.num_spec_accepted_tokens += old.num_spec_accepted_tokens;
  retired_stats.peak_used_blocks = std::max(retired_stats.peak_used_blocks, old.peak_used_blocks);
  const cache::KvMemorySnapshot memory = scheduler->memory_snapshot();
  retired_prefix_queries_tokens += memory.prefix_cache_queries_tokens;
  retired_prefix_hits_tokens += memory.prefix_cache_hits_tokens;
  scheduler = std::move(fresh);
  stale_steps_outstanding = steps_outstanding;
  std::optional<cache::KvMemoryResult> result = co_await apply_memory_ops({}, /*reset=*/true);
  // An empty list cannot be refused; a failure here is the prefix-cache actor gone (shutdown).
  fault.clear();
  if (result) scheduler->absorb_memory_result(*result);
}

runtime::Task<void> SchedulerActor::State::launch_steps_and_recover(bool continues_previous_step) {
  co_await launch_steps(continues_previous_step);
  while (!fault.empty()) {
    co_await recover_from_fault();
    co_await launch_steps(false);
  }
}

void SchedulerActor::State::end_request(uint64_t request_id, const char* finish_reason,
                                        std::string error) {
  runtime::OutputDelta delta;
  delta.request_id = request_id;
  delta.finished = true;
  delta.finish_reason = finish_reason;
  delta.error = std::move(error);
  outbox.push_back(std::move(delta));
}

void SchedulerActor::State::on_message(runtime::AddRequest& add) {
  if (add.cancel.stop_requested()) {
    end_request(add.request_id, "abort", {});
    return;
  }
  NewRequest request;
  request.id = add.request_id;
  request.prompt_token_ids = std::move(add.prompt_token_ids);
  request.sampling = std::move(add.sampling);
  request.seed =
      request.sampling.seed ? *request.sampling.seed : std::mt19937_64(seed_state + request.id)();
  const uint64_t id = request.id;
  live.emplace(id, LiveRequest{std::move(add.cancel)});
  try {
    scheduler->add(std::move(request));
  } catch (const std::exception& e) {  // a duplicate id: a bug, but the stream must end
    live.erase(id);
    end_request(id, "error", e.what());
  }
}

void SchedulerActor::State::on_message(runtime::CheckAborts&) { abort_pending.store(true); }

void SchedulerActor::State::on_message(runtime::StepDone& done) {
  --steps_outstanding;
  if (stale_steps_outstanding > 0) {  // planned by a Scheduler recovery replaced
    --stale_steps_outstanding;
    return;
  }
  if (!done.error.empty()) {
    // The step's KV contents are unknown, and blocks it was to fill may already be in the
    // prefix cache: recovery ends its requests and starts KV memory over.
    if (fault.empty()) fault = done.error;
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  collect(scheduler->update(done.input, done.output));
  stats.add_stage(runtime::StatsBoard::Stage::kProcessOutputs,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void SchedulerActor::State::sweep_aborts() {
  for (const auto& [id, request] : live) {
    if (request.cancel.stop_requested()) scheduler->abort(id);  // a no-op the second time
  }
}

// Each step: plan (the Scheduler's view of memory), one round trip to the prefix-cache actor
// that applies the plan's memory ops, then the step completed from its result goes to the
// executor. With overlap the round trip runs while the executor computes the step before.
runtime::Task<void> SchedulerActor::State::launch_steps(bool continues_previous_step) {
  if (!fault.empty()) co_return;  // recovery first
  const int max_outstanding = config.overlap ? 2 : 1;
  // A few rounds at most: a schedule() may only flush aborts (an empty step).
  for (int attempt = 0; attempt < 3 && fault.empty() && steps_outstanding < max_outstanding &&
                        scheduler->has_unfinished() && scheduler->can_schedule();
       ++attempt) {
    StepInput input;
    try {
      const auto start = std::chrono::steady_clock::now();
      cache::KvMemoryOps ops = scheduler->plan_step();
      std::optional<cache::KvMemoryResult> result = co_await apply_memory_ops(std::move(ops));
      if (!result) co_return;  // shutting down, or a fault to recover from
      input = scheduler->finish_step(std::move(*result));
      stats.add_stage(
          runtime::StatsBoard::Stage::kSchedule,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (input.seqs.empty()) {
        StepOutput nothing;
        nothing.step_id = input.step_id;
        collect(scheduler->update(input, nothing));
        if (steps_outstanding > 0) break;  // the running step's outcome comes first
        continue;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pagedserve: scheduler actor: %s\n", e.what());
      co_return;
    }
    runtime::ExecuteStep step;
    // A step queued behind a running one starts the moment that one ends.
    step.continues_previous_step = continues_previous_step || steps_outstanding > 0;
    step.input = std::move(input);
    // Capacity 2, at most 2 outstanding: the channel has room unless it was closed.
    if (!fault_fails_send(faults, ChannelSend::kExecuteStep) &&
        executor_inbox.try_send(boost::system::error_code{}, std::move(step))) {
      ++steps_outstanding;
      continue;
    }
    // The step will never run, yet its memory ops were applied (blocks it was to fill may be
    // in the prefix cache already): the same recovery as for a step the executor failed.
    fault = "the step could not be sent to the executor (its inbox is closed)";
    co_return;
  }
  co_await flush_memory_ops();
}

void SchedulerActor::State::collect(std::vector<RequestUpdate> updates) {
  for (RequestUpdate& update : updates) {
    auto it = live.find(update.request_id);
    if (it == live.end()) continue;
    for (SequenceUpdate& seq : update.seqs) {
      if (seq.new_token_ids.empty() && !seq.finished()) continue;
      runtime::OutputDelta delta;
      delta.request_id = update.request_id;
      delta.index = seq.index;
      if (seq.finished()) delta.sequence_finish_reason = finish_reason_name(seq.finish_reason);
      num_generated_tokens += static_cast<int64_t>(seq.new_token_ids.size());
      delta.token_ids = std::move(seq.new_token_ids);
      delta.logprobs = std::move(seq.logprobs);
      delta.num_cached_tokens = update.num_cached_tokens;
      delta.num_proposed_tokens = update.num_proposed_tokens;
      delta.num_accepted_tokens = update.num_accepted_tokens;
      outbox.push_back(std::move(delta));
      it->second.streamed = true;
    }
    if (!update.finished) continue;
    // Beam search streams nothing: its outputs are known only now.
    if (!it->second.streamed) {
      for (CompletedSequence& output : update.outputs) {
        if (output.token_ids.empty()) continue;
        runtime::OutputDelta delta;
        delta.request_id = update.request_id;
        delta.index = output.index;
        delta.sequence_finish_reason = finish_reason_name(output.finish_reason);
        num_generated_tokens += static_cast<int64_t>(output.token_ids.size());
        delta.token_ids = std::move(output.token_ids);
        delta.num_cached_tokens = update.num_cached_tokens;
        outbox.push_back(std::move(delta));
      }
    }
    runtime::OutputDelta end;
    end.request_id = update.request_id;
    end.finished = true;
    end.num_cached_tokens = update.num_cached_tokens;
    end.num_proposed_tokens = update.num_proposed_tokens;
    end.num_accepted_tokens = update.num_accepted_tokens;
    FinishReason reason = FinishReason::kAbort;
    if (!update.outputs.empty()) reason = update.outputs.front().finish_reason;
    if (!update.error.empty()) reason = FinishReason::kError;
    end.finish_reason = finish_reason_name(reason);
    end.error = std::move(update.error);
    outbox.push_back(std::move(end));
    live.erase(it);
  }
}

void SchedulerActor::State::publish_stats() {
  // The pool as the prefix-cache actor's last reply left it.
  const cache::KvMemorySnapshot memory = scheduler->memory_snapshot();
  const SchedulerStats sched = scheduler->stats();
  EngineStats counts;
  counts.num_running_seqs = static_cast<int>(scheduler->num_running());
  counts.num_waiting_seqs = static_cast<int>(scheduler->num_waiting());
  counts.num_swapped_seqs = static_cast<int>(scheduler->num_swapped());
  counts.num_kv_blocks_total = memory.num_total_device_blocks;
  counts.num_kv_blocks_used = memory.num_used_device_blocks;
  counts.num_kv_blocks_free = memory.num_free_device_blocks;
  counts.num_kv_blocks_cached = memory.num_cached_blocks;
  counts.peak_kv_blocks_used = std::max(sched.peak_used_blocks, retired_stats.peak_used_blocks);
  counts.prefix_cache_queries_tokens =
      memory.prefix_cache_queries_tokens + retired_prefix_queries_tokens;
  counts.prefix_cache_hits_tokens = memory.prefix_cache_hits_tokens + retired_prefix_hits_tokens;
  counts.num_preemptions_swap = sched.num_preemptions_swap + retired_stats.num_preemptions_swap;
  counts.num_preemptions_recompute =
      sched.num_preemptions_recompute + retired_stats.num_preemptions_recompute;
  counts.num_steps_planned_ahead =
      sched.num_steps_planned_ahead + retired_stats.num_steps_planned_ahead;
  counts.num_generated_tokens = num_generated_tokens;
  counts.num_spec_rows = sched.num_spec_rows + retired_stats.num_spec_rows;
  counts.num_spec_proposed_tokens =
      sched.num_spec_proposed_tokens + retired_stats.num_spec_proposed_tokens;
  counts.num_spec_accepted_tokens =
      sched.num_spec_accepted_tokens + retired_stats.num_spec_accepted_tokens;
  stats.publish(counts);
}

runtime::Task<void> SchedulerActor::State::forward_deltas(bool wait_for_delivery) {
  if (outbox.empty()) co_return;
  runtime::DecodeBatch batch;
  batch.deltas = std::move(outbox);
  outbox.clear();
  std::future<void> delivered;
  if (wait_for_delivery) {
    batch.delivered = std::make_shared<std::promise<void>>();
    delivered = batch.delivered->get_future();
  }
  // May wait while the tokenizer's inbox is full; the tokenizer's decode loop never waits
  // on this actor, so this always resumes.
  if (fault_fails_send(faults, ChannelSend::kDecodeBatch)) co_return;  // as if it were closed
  auto [error] = co_await tokenizer_inbox.async_send(boost::system::error_code{}, std::move(batch),
                                                     runtime::kAwaitTuple);
  // Blocking this thread is the point of overlap off: nothing else happens meanwhile.
  if (!error && wait_for_delivery) delivered.wait();
}

}  // namespace pagedserve::actors
