// The "kv" topic on the WebSocket protocol: subscribe / unsubscribe frames (and the error
// frames for bad ones), and KvFeed's frames checked by rebuilding the pool from them the way a
// client does (snapshot, then deltas) and comparing with the snapshots fed in.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "net/protocol/kv_frames.h"
#include "net/protocol/websocket.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;
using testing::stories_model;

WsInvalid expect_invalid(const std::string& text) {
  WsClientFrame frame = parse_ws_client_frame(text, stories_model());
  EXPECT_TRUE(std::holds_alternative<WsInvalid>(frame)) << text;
  if (!std::holds_alternative<WsInvalid>(frame)) return {};
  return std::get<WsInvalid>(frame);
}

TEST(KvFramesTest, ParsesSubscriptions) {
  WsClientFrame frame =
      parse_ws_client_frame(R"({"type": "subscribe", "topic": "kv"})", stories_model());
  ASSERT_TRUE(std::holds_alternative<WsSubscribe>(frame));
  EXPECT_EQ(std::get<WsSubscribe>(frame).topic, "kv");
  EXPECT_TRUE(std::get<WsSubscribe>(frame).subscribe);
  frame = parse_ws_client_frame(R"({"type": "unsubscribe", "topic": "kv", "id": "x"})",
                                stories_model());
  ASSERT_TRUE(std::holds_alternative<WsSubscribe>(frame));
  EXPECT_FALSE(std::get<WsSubscribe>(frame).subscribe);
}

TEST(KvFramesTest, BadSubscriptionsGetErrors) {
  WsInvalid invalid = expect_invalid(R"({"type": "subscribe", "topic": "gpu"})");
  EXPECT_EQ(invalid.error.param, "topic");
  EXPECT_EQ(invalid.error.code, "unknown_topic");
  EXPECT_NE(invalid.error.message.find("\"gpu\""), std::string::npos) << invalid.error.message;
  EXPECT_EQ(invalid.error.status, 400);
  EXPECT_EQ(invalid.id, "");

  invalid = expect_invalid(R"({"type": "subscribe", "id": "s1"})");
  EXPECT_EQ(invalid.error.param, "topic");
  EXPECT_EQ(invalid.id, "s1");  // echoed so the client can match it
  invalid = expect_invalid(R"({"type": "unsubscribe", "topic": 3})");
  EXPECT_EQ(invalid.error.param, "topic");
  invalid = expect_invalid(R"({"type": "subscribe", "topic": "kv")");  // malformed JSON
  EXPECT_EQ(invalid.id, "");
  invalid = expect_invalid(R"({"type": "subscribed", "topic": "kv", "id": "a"})");
  EXPECT_EQ(invalid.error.param, "type");
  EXPECT_NE(invalid.error.message.find("subscribe"), std::string::npos);
  // An error frame for them looks like every other error frame.
  const json error =
      json::parse(ws_error_frame("", invalid_request("x", "topic", "unknown_topic")));
  EXPECT_EQ(error["type"], "error");
  EXPECT_TRUE(error["id"].is_null());
  EXPECT_EQ(error["error"]["code"], "unknown_topic");
}

cache::KvBlockView used(std::vector<cache::SeqId> owners, int tokens, uint64_t hash = 0) {
  cache::KvBlockView view;
  view.state = cache::KvBlockState::kUsed;
  view.ref_count = static_cast<int>(owners.size());
  view.num_tokens = tokens;
  view.has_hash = hash != 0;
  view.hash = hash;
  view.owners = std::move(owners);
  return view;
}

// The client's side: a pool rebuilt from frames.
struct ClientPool {
  std::vector<json> device, cpu;
  void apply(const json& frame) {
    if (frame["kind"] == "snapshot") {
      device.assign(frame["num_device_blocks"].get<size_t>(), json());
      cpu.assign(frame["num_cpu_blocks"].get<size_t>(), json());
    }
    for (const json& b : frame["device"]) device[b["i"].get<size_t>()] = b;
    for (const json& b : frame["cpu"]) cpu[b["i"].get<size_t>()] = b;
  }
};

// What a block's entry must say (null = never listed: plain free).
void expect_block(const json& entry, const cache::KvBlockView& view, size_t id) {
  if (entry.is_null()) {
    EXPECT_EQ(view.state, cache::KvBlockState::kFree) << id;
    EXPECT_FALSE(view.has_hash) << id;
    return;
  }
  EXPECT_EQ(entry["s"], cache::kv_block_state_name(view.state)) << id;
  EXPECT_EQ(entry["r"], view.ref_count) << id;
  EXPECT_EQ(entry["t"], view.num_tokens) << id;
  EXPECT_EQ(entry["o"].get<std::vector<cache::SeqId>>(), view.owners) << id;
  if (view.has_hash) {
    EXPECT_EQ(std::stoull(entry["h"].get<std::string>(), nullptr, 16), view.hash) << id;
  } else {
    EXPECT_TRUE(entry["h"].is_null()) << id;
  }
}

cache::KvPoolSnapshot random_pool(std::mt19937& rng, int device, int cpu) {
  cache::KvPoolSnapshot pool;
  pool.block_size = 16;
  for (int i = 0; i < device + cpu; ++i) {
    cache::KvBlockView view;
    const uint32_t r = rng() % 4;
    if (r == 1) view = used({rng() % 5 + 1}, static_cast<int>(rng() % 16) + 1, rng() % 7 + 1);
    if (r == 2) view = used({1, 2, 3}, 16, 0xabcdef0123456789ULL);
    if (r == 3) {
      view.state = cache::KvBlockState::kCached;
      view.num_tokens = 16;
      view.has_hash = true;
      view.hash = rng();
    }
    (i < device ? pool.device : pool.cpu).push_back(view);
  }
  return pool;
}

TEST(KvFramesTest, FeedSendsSnapshotThenDeltasThatRebuildThePool) {
  std::mt19937 rng(3);
  auto random_pool = [&](int device, int cpu) { return net::random_pool(rng, device, cpu); };
  KvFeed feed;
  actors::EngineStats stats;
  EXPECT_EQ(feed.next_frame(nullptr, stats, {}, 0), "");  // nothing published yet
  ClientPool client;
  uint64_t version = 0;
  for (int round = 0; round < 30; ++round) {
    // Mostly same-sized pools (deltas); a resize now and then forces a fresh snapshot.
    const int device = round == 20 ? 12 : 10;
    auto map = std::make_shared<cache::KvMapSnapshot>();
    map->version = ++version;
    map->pool = random_pool(device, 3);
    map->seq_requests = {{1, 7}, {2, 7}, {3, 8}};
    stats.num_running_seqs = round;
    const json frame = json::parse(feed.next_frame(map, stats, {{7, "c1"}}, 1000 + round));
    EXPECT_EQ(frame["type"], "kv");
    EXPECT_EQ(frame["kind"], round == 0 || round == 20 || round == 21 ? "snapshot" : "delta")
        << round;
    EXPECT_EQ(frame["version"], version);
    EXPECT_EQ(frame["t_ms"], 1000 + round);
    EXPECT_EQ(frame["stats"]["running"], round);
    EXPECT_EQ(frame["seqs"][0], (json{{"seq", 1}, {"request", 7}, {"id", "c1"}}));
    EXPECT_TRUE(frame["seqs"][2]["id"].is_null());  // another connection's request
    client.apply(frame);
    for (size_t i = 0; i < map->pool.device.size(); ++i) {
      expect_block(client.device[i], map->pool.device[i], i);
    }
    for (size_t i = 0; i < map->pool.cpu.size(); ++i)
      expect_block(client.cpu[i], map->pool.cpu[i], i);
    if (HasFailure()) return;
  }
  // Nothing new: a delta without blocks, still with gauges.
  auto same = std::make_shared<cache::KvMapSnapshot>();
  same->version = ++version;
  same->pool = random_pool(10, 3);
  feed.next_frame(same, stats, {}, 1);
  const json quiet = json::parse(feed.next_frame(same, stats, {}, 2));
  EXPECT_EQ(quiet["kind"], "delta");
  EXPECT_TRUE(quiet["device"].empty());
  EXPECT_TRUE(quiet["stats"].is_object());
  feed.reset();
  EXPECT_EQ(json::parse(feed.next_frame(same, stats, {}, 3))["kind"], "snapshot");
}

// Subscribers in step share one pool half per (sent, latest) pair: the frames are those of a
// feed that makes its own, each with its own labels and time, and a subscriber that skips
// ticks (a slow reader) still rebuilds the pool from its larger deltas.
TEST(KvFramesTest, SubscribersInStepShareThePoolHalfOfTheirFrames) {
  std::mt19937 rng(8);
  KvPoolFrameCache cache;
  KvFeed alone, first(&cache), second(&cache), slow(&cache);
  ClientPool slow_client;
  actors::EngineStats stats;
  int64_t made_before = 0;
  for (int round = 0; round < 12; ++round) {
    auto map = std::make_shared<cache::KvMapSnapshot>();
    map->version = static_cast<uint64_t>(round + 1);
    map->pool = random_pool(rng, 10, 3);
    map->seq_requests = {{1, 7}, {2, 8}};
    const std::string expected = alone.next_frame(map, stats, {{7, "a"}}, round);
    EXPECT_EQ(first.next_frame(map, stats, {{7, "a"}}, round), expected) << round;
    const json other = json::parse(second.next_frame(map, stats, {{8, "b"}}, round + 5));
    const json mine = json::parse(expected);
    EXPECT_EQ(other["device"], mine["device"]);
    EXPECT_EQ(other["seqs"][1]["id"], "b");
    EXPECT_EQ(other["t_ms"], round + 5);
    EXPECT_EQ(cache.num_made(), made_before + 1) << "one pool half for the subscribers in step";
    made_before = cache.num_made();
    if (round % 3 == 2) {  // reads every third tick only
      slow_client.apply(json::parse(slow.next_frame(map, stats, {}, round)));
      made_before = cache.num_made();
      for (size_t i = 0; i < map->pool.device.size(); ++i) {
        expect_block(slow_client.device[i], map->pool.device[i], i);
      }
    }
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace pagedserve::net
