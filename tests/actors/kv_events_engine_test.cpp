// KV-cache events from the prefix-cache actor (actors/kv_event_publisher.h): one batch per op
// list that changed the prefix cache, none for a list that did not, a reset's batch removing
// every cached hash then clearing; and through the whole Engine, requests sharing a prompt give
// a stream whose stored blocks chain back to the root, whose tokens are the prompt's tokens and
// whose removals name stored hashes. Without a publisher nothing is recorded.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <variant>
#include <vector>

#include "actors/engine.h"
#include "actors/kv_event_publisher.h"
#include "actors/prefix_cache_actor.h"
#include "actors/runtime/actor_thread.h"
#include "cache/paged_kv_allocator.h"
#include "tests/actors/engine_test_util.h"

namespace pagedserve::actors {
namespace {

using testing_util::greedy;
using testing_util::stories_config;

// Keeps every batch (publish() runs on the prefix-cache thread; read after the engine stopped).
class RecordingPublisher final : public KvEventPublisher {
 public:
  void publish(KvEventBatch batch) override {
    std::lock_guard lock(mu_);
    batches_.push_back(std::move(batch));
  }
  std::vector<KvEventBatch> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }

 private:
  std::mutex mu_;
  std::vector<KvEventBatch> batches_;
};

cache::BlockManagerConfig pool() {
  cache::BlockManagerConfig config;
  config.block_size = 4;
  config.num_device_blocks = 8;
  config.watermark = 0.0;
  return config;
}

std::vector<int32_t> tokens(int n, int32_t first) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

// The actor without its thread: on_apply called directly, as the actor's run loop does.
struct ActorUnderTest {
  explicit ActorUnderTest(std::shared_ptr<KvEventPublisher> publisher)
      : inbox(thread.executor(), 1),
        reply(thread.executor(), 1),
        actor([] { return cache::make_kv_allocator(cache::KvAllocatorKind::kPaged, pool()); },
              inbox, reply, nullptr, std::move(publisher)) {}
  runtime::MemoryOpsApplied apply(cache::KvMemoryOps ops, bool reset = false) {
    return actor.on_apply({next_id++, std::move(ops), reset});
  }

  runtime::ActorThread thread{"unused"};
  runtime::Channel<runtime::ApplyMemoryOps> inbox;
  runtime::Channel<runtime::MemoryOpsApplied> reply;
  PrefixCacheActor actor;
  uint64_t next_id = 1;
};

TEST(KvEventsActor, OneBatchPerListThatChangedTheCache) {
  auto publisher = std::make_shared<RecordingPublisher>();
  ActorUnderTest t(publisher);
  const std::vector<int32_t> prompt = tokens(10, 1);  // two full blocks and a partial one
  ASSERT_EQ(t.apply({cache::KvMemoryOp::allocate(1, prompt, 10, 12)}).error, "");
  ASSERT_EQ(publisher->batches().size(), 1u);
  const KvEventBatch first = publisher->batches()[0];
  EXPECT_GT(first.timestamp_s, 1.6e9) << "wall-clock seconds";
  ASSERT_EQ(first.events.size(), 1u);
  const auto& stored = std::get<cache::KvBlockStored>(first.events[0]);
  EXPECT_EQ(stored.parent, std::nullopt);
  EXPECT_EQ(stored.token_ids, tokens(8, 1));
  EXPECT_EQ(stored.block_hashes, cache::hash_full_blocks(prompt, 4));

  // An append into the partial block stores nothing: no batch.
  ASSERT_EQ(t.apply({cache::KvMemoryOp::append(1, 11)}).error, "");
  EXPECT_EQ(publisher->batches().size(), 1u);
  // The append that fills it: one batch, one block under the second.
  ASSERT_EQ(t.apply({cache::KvMemoryOp::append(1, 12)}).error, "");
  ASSERT_EQ(publisher->batches().size(), 2u);
  const auto third = std::get<cache::KvBlockStored>(publisher->batches()[1].events.at(0));
  EXPECT_EQ(third.parent, stored.block_hashes[1]);
  EXPECT_EQ(third.token_ids, tokens(4, 9));
}

TEST(KvEventsActor, ResetRemovesEveryCachedHashThenClears) {
  auto publisher = std::make_shared<RecordingPublisher>();
  ActorUnderTest t(publisher);
  const std::vector<int32_t> prompt = tokens(13, 1);  // three full blocks
  ASSERT_EQ(t.apply({cache::KvMemoryOp::allocate(1, prompt, 13, 16)}).error, "");
  ASSERT_EQ(t.apply({cache::KvMemoryOp::allocate(2, tokens(3, 50), 3, 4)}, /*reset=*/true).error,
            "");
  ASSERT_EQ(publisher->batches().size(), 2u);
  const std::vector<cache::KvCacheEvent> events = publisher->batches()[1].events;
  ASSERT_EQ(events.size(), 2u);
  std::vector<cache::BlockHash> removed = std::get<cache::KvBlockRemoved>(events[0]).block_hashes;
  const std::vector<cache::BlockHash> expected = cache::hash_full_blocks(prompt, 4);
  ASSERT_EQ(removed.size(), expected.size());
  for (const cache::BlockHash& hash : expected) {
    EXPECT_NE(std::find(removed.begin(), removed.end(), hash), removed.end());
  }
  EXPECT_TRUE(std::holds_alternative<cache::KvAllBlocksCleared>(events[1]));
  EXPECT_TRUE(t.actor.allocator().cached_block_hashes().empty());
}

TEST(KvEventsActor, WithoutAPublisherNothingIsRecorded) {
  ActorUnderTest t(nullptr);
  ASSERT_EQ(t.apply({cache::KvMemoryOp::allocate(1, tokens(10, 1), 10, 12)}).error, "");
  // The allocator still caches (the same decisions); only no recorder is attached, which
  // set_event_recorder would now refuse (the manager holds a sequence).
  EXPECT_EQ(t.actor.allocator().cached_block_hashes().size(), 2u);
}

// Through the engine: the prompt's blocks arrive as a chain from the root with the prompt's
// token ids; a second request with the same prompt adds nothing for those blocks (a hit).
TEST(KvEventsEngine, RequestsSharingAPromptPublishItsChainOnce) {
  auto publisher = std::make_shared<RecordingPublisher>();
  EngineOptions options;
  options.kv_event_publisher = publisher;
  EngineConfig config = stories_config();
  auto engine = Engine::start(config, options);
  const std::string text =
      "Once upon a time there was a little girl named Lily. She liked to play in the park with "
      "her friends every day after school.";
  const std::vector<int32_t> prompt = engine->tokenizer().encode(text);
  ASSERT_GE(prompt.size(), 32u);
  for (int i = 0; i < 2; ++i) {
    GenerateRequest request;
    request.prompt_token_ids = prompt;
    request.sampling = greedy(4);
    auto stream = engine->submit(std::move(request));
    while (stream->next()) {
    }
  }
  engine->shutdown();

  // Replay into a mirror: hash -> tokens from the root.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int32_t>> mirror;
  const auto key = [](const cache::BlockHash& h) { return std::pair(h.low64, h.high64); };
  int prompt_stores = 0;
  const int block_size = engine->config().block_size;
  for (const KvEventBatch& batch : publisher->batches()) {
    ASSERT_FALSE(batch.events.empty()) << "an empty batch was published";
    for (const cache::KvCacheEvent& event : batch.events) {
      if (const auto* stored = std::get_if<cache::KvBlockStored>(&event)) {
        std::vector<int32_t> chain;
        if (stored->parent) {
          ASSERT_TRUE(mirror.count(key(*stored->parent))) << "parent not stored before";
          chain = mirror[key(*stored->parent)];
        }
        for (size_t k = 0; k < stored->block_hashes.size(); ++k) {
          chain.insert(chain.end(), stored->token_ids.begin() + k * block_size,
                       stored->token_ids.begin() + (k + 1) * block_size);
          ASSERT_TRUE(mirror.emplace(key(stored->block_hashes[k]), chain).second);
          // Each chain is the prompt's tokens, or the prompt followed by generated ones.
          const size_t common = std::min(chain.size(), prompt.size());
          EXPECT_TRUE(std::equal(chain.begin(), chain.begin() + common, prompt.begin()));
          prompt_stores += chain.size() <= prompt.size() ? 1 : 0;
        }
      } else if (const auto* removed = std::get_if<cache::KvBlockRemoved>(&event)) {
        for (const cache::BlockHash& h : removed->block_hashes) {
          ASSERT_EQ(mirror.erase(key(h)), 1u) << "removal of a hash never stored";
        }
      }
    }
  }
  // Every full block of the prompt stored once (the second request hit them all).
  EXPECT_EQ(prompt_stores, static_cast<int>(prompt.size()) / block_size);
}

}  // namespace
}  // namespace pagedserve::actors
