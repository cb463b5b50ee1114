// PrefixCacheActor as the source of the KV block map (the playground's "kv" topic): it
// publishes only while someone watches and memory changed, maps sequences to the requests the
// allocate ops name (forks inherit), starts over on reset; through the Engine, the map names
// the engine's request ids.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "actors/engine.h"
#include "actors/prefix_cache_actor.h"
#include "actors/runtime/actor_thread.h"
#include "actors/runtime/kv_map_board.h"
#include "cache/paged_kv_allocator.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

cache::BlockManagerConfig small_pool() {
  cache::BlockManagerConfig config;
  config.block_size = 4;
  config.num_device_blocks = 16;
  config.num_cpu_blocks = 4;
  config.watermark = 0.0;
  return config;
}

runtime::ApplyMemoryOps ops_of(cache::KvMemoryOps ops, bool reset = false) {
  runtime::ApplyMemoryOps request;
  request.ops = std::move(ops);
  request.reset = reset;
  return request;
}

TEST(PrefixCacheKvMapTest, PublishesOnlyWhenWatchedAndChanged) {
  runtime::ActorThread thread{"unused"};
  runtime::Channel<runtime::ApplyMemoryOps> inbox(thread.executor(), 1);
  runtime::Channel<runtime::MemoryOpsApplied> reply(thread.executor(), 1);
  PrefixCacheActor actor(
      [] { return cache::make_kv_allocator(cache::KvAllocatorKind::kPaged, small_pool()); }, inbox,
      reply);
  runtime::KvMapBoard board;
  actor.set_kv_map_board(&board);
  EXPECT_FALSE(actor.publish_kv_map_if_wanted());  // nobody watches
  board.add_subscriber();
  EXPECT_TRUE(actor.publish_kv_map_if_wanted());  // a first picture, even without changes
  EXPECT_FALSE(actor.publish_kv_map_if_wanted());
  ASSERT_NE(board.latest(), nullptr);
  EXPECT_EQ(board.latest()->pool.device.size(), 16u);

  cache::KvMemoryOp allocate = cache::KvMemoryOp::allocate(1, {1, 2, 3, 4, 5, 6}, 6, 6);
  allocate.group = 77;
  ASSERT_EQ(actor.on_apply(ops_of({allocate, cache::KvMemoryOp::fork(1, 2)})).error, "");
  EXPECT_TRUE(actor.publish_kv_map_if_wanted());
  const auto map = board.latest();
  EXPECT_EQ(map->version, 2u);
  EXPECT_EQ(map->seq_requests, (std::vector<std::pair<cache::SeqId, uint64_t>>{{1, 77}, {2, 77}}));
  int shared = 0;
  for (const cache::KvBlockView& view : map->pool.device) shared += view.ref_count == 2;
  EXPECT_EQ(shared, 2);  // the six tokens' two blocks, shared by the fork

  // A reset starts over: an empty pool, no sequences.
  ASSERT_EQ(actor.on_apply(ops_of({}, /*reset=*/true)).error, "");
  EXPECT_TRUE(actor.publish_kv_map_if_wanted());
  EXPECT_TRUE(board.latest()->seq_requests.empty());
  // The last watcher leaving drops the picture.
  board.remove_subscriber();
  EXPECT_EQ(board.latest(), nullptr);
  EXPECT_FALSE(actor.publish_kv_map_if_wanted());
}

TEST(PrefixCacheKvMapTest, EngineMapNamesRequestsAndShutsDownPromptly) {
  EngineConfig config;
  config.model_dir = pagedserve::testing::stories260k_dir();
  config.num_kv_blocks = 64;
  config.num_threads = 1;
  auto engine = Engine::start(config);
  auto watch = engine->watch_kv_map();
  GenerateRequest request;
  request.prompt = "Once upon a time there was a little girl";
  request.sampling.max_tokens = 400;
  request.sampling.ignore_eos = true;
  request.sampling.n = 2;
  // stories260K can finish a whole request between two 100 ms samples of the map on a fast
  // machine, so the request is sent again (bounded) until a sample catches it holding blocks.
  bool seen = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    auto stream = engine->submit(request);
    while (!seen && !stream->finished()) {
      if (auto map = engine->kv_map()) {
        for (const auto& [seq, request_id] : map->seq_requests) {
          seen = seen || request_id == stream->request_id();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    while (stream->next()) {
    }
  }
  EXPECT_TRUE(seen);
  watch.reset();
  engine->shutdown();  // the publishing loop ends with the actor's run loop
}

}  // namespace
}  // namespace pagedserve::actors
