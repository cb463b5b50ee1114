// PrefixCacheActor: the owner of the KV allocator on its own thread. A request/reply round trip
// gives what applying the same list directly gives; a refused op comes back as an error value;
// and a remote Scheduler whose steps are in flight when every request is aborted leaves every
// block free once its queued frees reach the actor, as the scheduler actor does at shutdown;
// a reset request starts over with an empty allocator.
#include "actors/prefix_cache_actor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <numeric>
#include <vector>

#include "actors/runtime/actor_thread.h"
#include "actors/scheduler.h"
#include "cache/paged_kv_allocator.h"

namespace pagedserve::actors {
namespace {

cache::BlockManagerConfig pool() {
  cache::BlockManagerConfig config;
  config.block_size = 4;
  config.num_device_blocks = 32;
  config.num_cpu_blocks = 8;
  config.watermark = 0.0;
  return config;
}

std::vector<int32_t> iota(int n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The actor on its thread, and a client thread standing in for the scheduler actor.
struct Actors {
  Actors()
      : inbox(prefix_thread.executor(), 1),
        reply(client_thread.executor(), 1),
        actor([] { return cache::make_kv_allocator(cache::KvAllocatorKind::kPaged, pool()); },
              inbox, reply) {
    prefix_thread.spawn(actor.run());
    prefix_thread.start();
    client_thread.start();
  }
  // Closes the channels and joins both threads; the actor's allocator is readable after.
  void shut_down() {
    inbox.close();
    reply.close();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    prefix_thread.join_until(deadline);
    client_thread.join_until(deadline);
  }

  runtime::ActorThread prefix_thread{"prefix-cache"};
  runtime::ActorThread client_thread{"client"};
  runtime::Channel<runtime::ApplyMemoryOps> inbox;
  runtime::Channel<runtime::MemoryOpsApplied> reply;
  PrefixCacheActor actor;
};

runtime::Task<runtime::MemoryOpsApplied> round_trip(Actors& actors, uint64_t id,
                                                    cache::KvMemoryOps ops) {
  runtime::ApplyMemoryOps request{id, std::move(ops), /*reset=*/false};
  auto [send_error] = co_await actors.inbox.async_send(boost::system::error_code{},
                                                       std::move(request), runtime::kAwaitTuple);
  if (send_error) throw std::runtime_error("send failed");
  auto [receive_error, reply] = co_await actors.reply.async_receive(runtime::kAwaitTuple);
  if (receive_error) throw std::runtime_error("receive failed");
  co_return std::move(reply);
}

runtime::Task<void> two_round_trips(Actors& actors, cache::KvMemoryOps first,
                                    cache::KvMemoryOps second,
                                    std::promise<std::vector<runtime::MemoryOpsApplied>>& done) {
  std::vector<runtime::MemoryOpsApplied> replies;
  replies.push_back(co_await round_trip(actors, 1, std::move(first)));
  replies.push_back(co_await round_trip(actors, 2, std::move(second)));
  done.set_value(std::move(replies));
}

TEST(PrefixCacheActor, ARoundTripGivesWhatApplyingTheListDirectlyGives) {
  const std::vector<int32_t> prompt = iota(14, 1);
  const cache::KvMemoryOps first = {cache::KvMemoryOp::allocate(1, prompt, 14, 16),
                                    cache::KvMemoryOp::append(1, 15),
                                    cache::KvMemoryOp::fork(1, 2)};
  // Sequence 3 hits sequence 1's three full blocks; an op for an unknown sequence fails.
  const cache::KvMemoryOps second = {cache::KvMemoryOp::append(2, 40),
                                     cache::KvMemoryOp::allocate(3, prompt, 14, 16),
                                     cache::KvMemoryOp::swap_out(2), cache::KvMemoryOp::free(99)};
  Actors actors;
  std::promise<std::vector<runtime::MemoryOpsApplied>> done;
  auto replies_future = done.get_future();
  actors.client_thread.spawn(two_round_trips(actors, first, second, done));
  ASSERT_EQ(replies_future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const std::vector<runtime::MemoryOpsApplied> replies = replies_future.get();
  actors.shut_down();

  cache::PagedKvAllocator reference(pool());
  const cache::KvMemoryResult want_first = cache::apply_kv_memory_ops(reference, first);
  cache::KvMemoryApplier applier(reference);
  for (size_t i = 0; i + 1 < second.size(); ++i) applier.apply(second[i]);
  const cache::KvMemoryResult want_second = applier.finish();

  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].request_id, 1u);
  EXPECT_EQ(replies[0].error, "");
  EXPECT_EQ(replies[1].request_id, 2u);
  EXPECT_NE(replies[1].error.find("free: unknown sequence 99"), std::string::npos)
      << replies[1].error;
  const auto same = [](const cache::KvMemoryResult& got, const cache::KvMemoryResult& want) {
    EXPECT_EQ(got.swap_out, want.swap_out);
    EXPECT_EQ(got.swap_in, want.swap_in);
    EXPECT_EQ(got.block_copies, want.block_copies);
    ASSERT_EQ(got.allocations.size(), want.allocations.size());
    for (size_t i = 0; i < got.allocations.size(); ++i) {
      EXPECT_EQ(got.allocations[i].num_cached_tokens, want.allocations[i].num_cached_tokens);
      EXPECT_EQ(got.allocations[i].num_tokens, want.allocations[i].num_tokens);
    }
    ASSERT_EQ(got.seqs.size(), want.seqs.size());
    for (size_t i = 0; i < got.seqs.size(); ++i) {
      EXPECT_EQ(got.seqs[i].seq, want.seqs[i].seq);
      EXPECT_EQ(got.seqs[i].swapped, want.seqs[i].swapped);
      EXPECT_EQ(got.seqs[i].blocks, want.seqs[i].blocks);
    }
    EXPECT_EQ(got.snapshot.num_free_device_blocks, want.snapshot.num_free_device_blocks);
    EXPECT_EQ(got.snapshot.num_free_cpu_blocks, want.snapshot.num_free_cpu_blocks);
  };
  same(replies[0].result, want_first);
  same(replies[1].result, want_second);
  EXPECT_EQ(replies[1].result.allocations.at(0).num_cached_tokens, 12);
  EXPECT_EQ(replies[1].result.block_copies.size(), 1u) << "sequence 2's copy-on-write";
  EXPECT_EQ(actors.actor.allocator().block_manager()->check_invariants(), "");
}

// A reset request (the scheduler actor's recovery from a fault, docs/actors.md "Failures")
// replaces the allocator by an empty one before applying its ops: the old sequences are gone,
// every other block is free, and the prefix cache has nothing left to serve.
TEST(PrefixCacheActor, ResetStartsOverWithAnEmptyAllocator) {
  Actors actors;
  actors.shut_down();  // on_apply from this thread from now on
  const std::vector<int32_t> prompt = iota(14, 1);
  const runtime::MemoryOpsApplied first = actors.actor.on_apply(
      {1, {cache::KvMemoryOp::allocate(1, prompt, 14, 16), cache::KvMemoryOp::free(1)}, false});
  ASSERT_EQ(first.error, "");
  // Without a reset the same prompt is served the freed blocks: three full blocks.
  const runtime::MemoryOpsApplied hit =
      actors.actor.on_apply({2, {cache::KvMemoryOp::allocate(2, prompt, 14, 16)}, false});
  EXPECT_EQ(hit.result.allocations.at(0).num_cached_tokens, 12);

  const runtime::MemoryOpsApplied after =
      actors.actor.on_apply({3, {cache::KvMemoryOp::allocate(3, prompt, 14, 16)}, true});
  EXPECT_EQ(after.error, "");
  EXPECT_EQ(after.result.allocations.at(0).num_cached_tokens, 0);
  EXPECT_EQ(after.result.snapshot.num_free_device_blocks, 32 - 4) << "only sequence 3's blocks";
  EXPECT_EQ(after.result.snapshot.prefix_cache_hits_tokens, 0);
  EXPECT_FALSE(actors.actor.allocator().has_sequence(2));
  EXPECT_TRUE(actors.actor.allocator().has_sequence(3));
  EXPECT_EQ(actors.actor.allocator().block_manager()->check_invariants(), "");
}

struct ShutdownRun {
  size_t steps_in_flight = 0;
  int blocks_used_in_flight = 0;
  bool memory_ops_left = true;
  cache::KvMemorySnapshot final_snapshot;
};

// The scheduler actor's part: two steps planned and applied (in flight on an executor that
// never answers), then every request aborted, the steps retired with no results (as the
// scheduler actor does for steps that never ran), and the queued frees handed over.
runtime::Task<void> abort_with_steps_in_flight(Actors& actors, std::promise<ShutdownRun>& done) {
  SchedulerConfig config;
  config.kv_placement = KvMemoryPlacement::kRemote;
  config.max_num_batched_tokens = 16;
  Scheduler scheduler(config, pool());
  for (uint64_t id = 1; id <= 3; ++id) {
    NewRequest request;
    request.id = id;
    request.prompt_token_ids = iota(10, 1);  // shared: later ones hit the first's blocks
    request.sampling.max_tokens = 20;
    request.sampling.n = id == 2 ? 2 : 1;
    scheduler.add(std::move(request));
  }
  uint64_t next_id = 1;
  std::vector<StepInput> in_flight;
  while (in_flight.size() < 2 && scheduler.can_schedule()) {
    runtime::MemoryOpsApplied reply = co_await round_trip(actors, next_id++, scheduler.plan_step());
    in_flight.push_back(scheduler.finish_step(std::move(reply.result)));
  }
  ShutdownRun run;
  run.steps_in_flight = scheduler.num_steps_in_flight();
  run.blocks_used_in_flight = scheduler.memory_snapshot().num_used_device_blocks;
  for (uint64_t id = 1; id <= 3; ++id) scheduler.abort(id);
  for (const StepInput& step : in_flight) {
    StepOutput none;
    none.step_id = step.step_id;
    none.seqs.resize(step.seqs.size());
    scheduler.update(step, none);
  }
  runtime::MemoryOpsApplied reply =
      co_await round_trip(actors, next_id++, scheduler.take_memory_ops());
  scheduler.absorb_memory_result(reply.result);
  run.memory_ops_left = scheduler.has_memory_ops();
  run.final_snapshot = scheduler.memory_snapshot();
  done.set_value(run);
}

TEST(PrefixCacheActor, AbortingWithStepsInFlightLeavesEveryBlockFree) {
  Actors actors;
  std::promise<ShutdownRun> done;
  auto run_future = done.get_future();
  actors.client_thread.spawn(abort_with_steps_in_flight(actors, done));
  ASSERT_EQ(run_future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const ShutdownRun run = run_future.get();
  actors.shut_down();

  EXPECT_GE(run.steps_in_flight, 1u);
  EXPECT_GT(run.blocks_used_in_flight, 0);
  EXPECT_FALSE(run.memory_ops_left);
  EXPECT_EQ(run.final_snapshot.num_used_device_blocks, 0);
  const cache::KvAllocator& kv = actors.actor.allocator();
  EXPECT_EQ(kv.num_free_device_blocks(), kv.num_total_device_blocks());
  EXPECT_EQ(kv.num_free_cpu_blocks(), 8);
  EXPECT_EQ(kv.block_manager()->check_invariants(), "");
}

}  // namespace
}  // namespace pagedserve::actors
