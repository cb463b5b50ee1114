// The "kv" topic end to end on a real server and engine: a snapshot then deltas that, applied
// by the client, show a prompt's blocks shared by n = 3 samples (ref count 3, owned by this
// connection's request) and every block free or cached once it ended; kv frames at least
// 100 ms apart; bad subscription frames answered with error frames on a connection that stays
// usable; unsubscribe stops the frames; the page and the key-as-subprotocol handshake.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

json read_frame(WsClient& client) {
  std::optional<std::string> text = client.read();
  return text ? json::parse(*text) : json();
}

// The client's picture of the device pool, from kv frames.
struct Pool {
  std::vector<json> device;
  std::map<uint64_t, json> seqs;
  std::vector<int64_t> times;  // t_ms of every kv frame
  void apply(const json& frame) {
    if (frame["kind"] == "snapshot")
      device.assign(frame["num_device_blocks"].get<size_t>(), json());
    for (const json& b : frame["device"]) device[b["i"].get<size_t>()] = b;
    seqs.clear();
    for (const json& s : frame["seqs"]) seqs[s["seq"].get<uint64_t>()] = s;
    times.push_back(frame["t_ms"].get<int64_t>());
  }
  int count(const std::string& state) const {
    int n = 0;
    for (const json& b : device) n += (b.is_null() ? "free" : b["s"].get<std::string>()) == state;
    return n;
  }
};

std::string completion(const std::string& id, int max_tokens, int n) {
  // 40 words: a prompt of a few full blocks (block size 16) the three samples share.
  std::string prompt = "Once upon a time there was a little girl named Lily who loved to play";
  prompt += " outside in the park with her friends and her big brown dog every sunny day of";
  return json{{"type", "completion"},     {"id", id}, {"prompt", prompt},
              {"max_tokens", max_tokens}, {"n", n},   {"ignore_eos", true},
              {"temperature", 1.0},       {"seed", 1}}
      .dump();
}

TEST(WsKvTest, SnapshotThenDeltasShowSharedBlocksThenFreeOnes) {
  TestServer server;
  WsClient client(server.port());
  client.send(R"({"type": "subscribe", "topic": "kv"})");
  Pool pool;
  json first = read_frame(client);
  ASSERT_EQ(first["type"], "kv") << first.dump();
  EXPECT_EQ(first["kind"], "snapshot");
  EXPECT_EQ(first["num_device_blocks"], 1024);
  EXPECT_EQ(first["block_size"], 16);
  EXPECT_EQ(first["stats"]["blocks_total"], 1024);
  pool.apply(first);
  EXPECT_EQ(pool.count("used"), 0);

  // Four requests of three samples keep the engine busy for several 100 ms frames; a fast
  // machine can still finish them between two frames, so the round is repeated (bounded)
  // until a frame has caught the shared blocks.
  int max_shared = 0;
  bool owned_by_c1 = false;
  for (int round = 0; round < 8 && (max_shared < 3 || !owned_by_c1); ++round) {
    for (const char* id : {"c1", "c2", "c3", "c4"}) client.send(completion(id, 300, 3));
    int done = 0;
    while (done < 12) {
      const json frame = read_frame(client);
      ASSERT_TRUE(frame.is_object());
      if (frame["type"] == "done") ++done;
      if (frame["type"] != "kv") continue;
      EXPECT_EQ(frame["kind"], "delta");
      pool.apply(frame);
      for (const json& b : pool.device) {
        if (b.is_null() || b["s"] != "used") continue;
        // Every owner is a sequence the frame names, of this connection's request.
        for (const json& seq : b["o"]) {
          ASSERT_TRUE(pool.seqs.count(seq.get<uint64_t>())) << frame.dump();
          owned_by_c1 = owned_by_c1 || pool.seqs[seq.get<uint64_t>()]["id"] == "c1";
        }
        EXPECT_EQ(b["r"].get<size_t>(), b["o"].size());
        max_shared = std::max(max_shared, b["r"].get<int>());
      }
    }
  }
  EXPECT_GE(max_shared, 3) << "the prompt's blocks are shared by the samples (and the requests)";
  EXPECT_TRUE(owned_by_c1);
  // After the request: nothing used, the prompt's full blocks kept as cached.
  for (int i = 0; i < 50 && pool.count("used") > 0; ++i) {
    const json frame = read_frame(client);
    ASSERT_EQ(frame["type"], "kv") << frame.dump();
    pool.apply(frame);
  }
  EXPECT_EQ(pool.count("used"), 0);
  EXPECT_GT(pool.count("cached"), 0);
  ASSERT_GE(pool.times.size(), 3u);
  for (size_t i = 1; i < pool.times.size(); ++i) {
    EXPECT_GE(pool.times[i] - pool.times[i - 1], 100) << "more than 10 kv frames a second";
  }
}

TEST(WsKvTest, BadSubscriptionsGetErrorFramesAndUnsubscribeStops) {
  TestServer server;
  WsClient client(server.port());
  client.send(R"({"type": "subscribe", "topic": "weather", "id": "s1"})");
  json error = read_frame(client);
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["id"], "s1");
  EXPECT_EQ(error["error"]["code"], "unknown_topic");
  client.send(R"({"type": "subscribe", "topic": )");
  error = read_frame(client);
  EXPECT_EQ(error["type"], "error");
  EXPECT_TRUE(error["id"].is_null());
  client.send(R"({"type": "unsubscribe"})");
  EXPECT_EQ(read_frame(client)["error"]["param"], "topic");

  client.send(R"({"type": "subscribe", "topic": "kv"})");
  EXPECT_EQ(read_frame(client)["kind"], "snapshot");
  client.send(R"({"type": "unsubscribe", "topic": "kv"})");
  client.send(completion("u1", 30, 1));
  bool started = false;
  for (json frame = read_frame(client); !(frame["type"] == "done"); frame = read_frame(client)) {
    ASSERT_TRUE(frame.is_object());
    if (frame["type"] == "kv") {
      EXPECT_FALSE(started) << "a kv frame after unsubscribe was handled";
    } else {
      started = true;
    }
  }
}

TEST(WsKvTest, PageAndKeyAsSubprotocol) {
  HttpServerConfig config;
  config.api_keys = {"k1"};
  TestServer server(config);
  const HttpResult page = http_request(server.port(), "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("/ui/app.js"), std::string::npos);
  EXPECT_EQ(http_request(server.port(), "GET", "/ui/app.js").status, 200);

  const Headers upgrade = {{"Sec-WebSocket-Protocol", "pagedserve, pagedserve.key.azE"}};  // k1
  const HttpResult accepted = ws_handshake(server.port(), "/v1/stream", upgrade);
  EXPECT_EQ(accepted.status, 101);
  EXPECT_EQ(accepted.headers.at("sec-websocket-protocol"), "pagedserve");
  EXPECT_EQ(ws_handshake_status(server.port(), "/v1/stream",
                                {{"Sec-WebSocket-Protocol", "pagedserve, pagedserve.key.azI"}}),
            401);
  EXPECT_EQ(ws_handshake_status(server.port(), "/v1/stream"), 401);

  HttpServerConfig no_ui;
  no_ui.serve_ui = false;
  TestServer plain(no_ui);
  EXPECT_EQ(http_request(plain.port(), "GET", "/").status, 404);
}

}  // namespace
}  // namespace pagedserve::net::testing
