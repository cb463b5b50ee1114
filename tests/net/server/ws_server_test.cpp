// The WebSocket endpoint (GET /v1/stream) end to end: two requests streamed interleaved on one
// socket, a cancel (done frames with "abort", then nothing more for that id), invalid and
// binary frames (error frames, the connection stays), duplicate ids, a client that
// disconnects (its requests aborted, blocks freed), a slow reader (failed with "slow_reader"
// instead of buffering without bound), and the timeouts: a request outlives the idle timeout
// while its client is silent, an idle silent client is closed with a close frame, a client that
// stops reading is cut after the write timeout.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "tests/actors/faulty_executor.h"
#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string start_frame(const std::string& id, int max_tokens) {
  return json{{"type", "completion"},     {"id", id},           {"prompt", "Once upon a time"},
              {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}}
      .dump();
}

json read_frame(WsClient& client) {
  std::optional<std::string> text = client.read();
  if (!text) return json();
  return json::parse(*text);
}

TEST(WsServerTest, TwoInterleavedRequestsAndACancel) {
  TestServer server;
  WsClient client(server.port());
  // a is long enough (200 tokens) that b starts while it runs even on a loaded machine (with 40,
  // a sometimes finished before b was admitted).
  client.send(start_frame("a", 200));
  client.send(start_frame("b", 400));
  std::map<std::string, int> tokens;
  std::vector<std::string> order;  // ids of token frames, in arrival order
  json a_done;
  while (a_done.is_null()) {
    const json frame = read_frame(client);
    ASSERT_TRUE(frame.is_object());
    if (frame["type"] == "token") {
      tokens[frame["id"]] += static_cast<int>(frame["token_ids"].size());
      order.push_back(frame["id"]);
    } else if (frame["type"] == "done" && frame["id"] == "a") {
      a_done = frame;
    } else {
      FAIL() << frame.dump();
    }
  }
  EXPECT_EQ(a_done["finish_reason"], "length");
  EXPECT_EQ(a_done["usage"]["completion_tokens"], 200);
  EXPECT_EQ(tokens["a"], 200);
  ASSERT_GT(tokens["b"], 0) << "b made no progress while a ran";
  // Interleaved: some of b's tokens arrived before a's last one.
  EXPECT_LT(std::find(order.begin(), order.end(), "b") - order.begin(),
            std::find(order.rbegin(), order.rend(), "a").base() - order.begin());

  client.send(R"({"type": "cancel", "id": "b"})");
  json b_done;
  while (b_done.is_null()) {
    const json frame = read_frame(client);
    ASSERT_TRUE(frame.is_object());
    ASSERT_EQ(frame["id"], "b") << frame.dump();
    if (frame["type"] == "done") b_done = frame;
  }
  EXPECT_EQ(b_done["finish_reason"], "abort");
  EXPECT_TRUE(server.wait_until_idle(5s));

  // The connection still works, and the id can be reused.
  client.send(start_frame("b", 3));
  int n = 0;
  for (json frame = read_frame(client); frame["type"] != "done"; frame = read_frame(client)) {
    ASSERT_EQ(frame["id"], "b") << frame.dump();
    ASSERT_EQ(frame["type"], "token") << frame.dump();
    n += static_cast<int>(frame["token_ids"].size());
  }
  EXPECT_EQ(n, 3);
}

TEST(WsServerTest, InvalidFramesGetErrorFramesAndTheConnectionStays) {
  TestServer server;
  WsClient client(server.port());
  client.send("{not json");
  json frame = read_frame(client);
  EXPECT_EQ(frame["type"], "error");
  EXPECT_TRUE(frame["id"].is_null());
  client.send_binary("\x01\x02");
  frame = read_frame(client);
  EXPECT_EQ(frame["type"], "error");
  client.send(R"({"type": "completion", "id": "x", "prompt": "a", "max_tokens": 0})");
  frame = read_frame(client);
  EXPECT_EQ(frame["type"], "error");
  EXPECT_EQ(frame["id"], "x");
  EXPECT_EQ(frame["error"]["param"], "max_tokens");
  client.send(R"({"type": "cancel", "id": "never-started"})");  // a no-op, no reply

  client.send(start_frame("d", 200));
  client.send(start_frame("d", 5));
  bool duplicate_seen = false;
  while (!duplicate_seen) {
    frame = read_frame(client);
    ASSERT_TRUE(frame.is_object());
    duplicate_seen = frame["type"] == "error";
  }
  EXPECT_EQ(frame["id"], "d");
  EXPECT_EQ(frame["error"]["code"], "duplicate_id");
}

TEST(WsServerTest, DisconnectAbortsEveryRequestOfTheSocket) {
  TestServer server;
  {
    WsClient client(server.port());
    client.send(start_frame("x", 400));
    client.send(start_frame("y", 400));
    int token_frames = 0;
    while (token_frames < 4) {
      const json frame = read_frame(client);
      ASSERT_EQ(frame["type"], "token");
      ++token_frames;
    }
    client.disconnect();
  }
  EXPECT_TRUE(server.wait_until_idle(5s));
}

// A graceful stop lets the socket's running request finish, then closes the socket.
TEST(WsServerTest, StopFinishesRunningRequestsThenCloses) {
  TestServer server;
  WsClient client(server.port());
  client.send(start_frame("s", 100));
  ASSERT_EQ(read_frame(client)["type"], "token");
  std::thread stopper([&] { server.server().stop(); });
  json last;
  while (std::optional<std::string> text = client.read()) last = json::parse(*text);
  stopper.join();
  EXPECT_EQ(last["type"], "done") << last.dump();
  EXPECT_EQ(last["finish_reason"], "length") << last.dump();
  EXPECT_EQ(client.ending().close_code, 1001) << client.ending().error;  // going away
  EXPECT_EQ(client.ending().close_reason, "server shutdown");
}

// A request held in the engine (as behind a long queue) for three idle timeouts while the client
// sends nothing and does not even read (so answers no ping, as a client on a loaded machine may
// not): the connection is busy, so it stays, and the request streams to its end. The soak saw
// Beast's keep-alive timeout reset such sockets.
TEST(WsServerTest, ARunningRequestOutlivesTheIdleTimeoutWhileItsClientIsSilent) {
  if (!actors::kFaultInjectionCompiledIn) GTEST_SKIP() << "fault hooks are compiled out";
  auto control = std::make_shared<actors::testing_util::ExecutorFaultControl>();
  control->hold_first_step = true;
  HttpServerConfig config;
  config.idle_timeout = 1s;
  TestServer server(config, 256, 1024,
                    std::make_shared<const actors::FaultHooks>(
                        actors::testing_util::executor_fault_hooks(control)));
  WsClient client(server.port());
  client.send(start_frame("a", 40));
  ASSERT_TRUE(control->wait_until_first_step_held(20s));
  std::this_thread::sleep_for(3s);
  control->release();
  int tokens = 0;
  json done;
  while (done.is_null()) {
    const json frame = read_frame(client);
    ASSERT_TRUE(frame.is_object()) << "the connection ended: " << client.ending().error;
    ASSERT_EQ(frame["id"], "a") << frame.dump();
    if (frame["type"] == "token") {
      tokens += static_cast<int>(frame["token_ids"].size());
    } else {
      ASSERT_EQ(frame["type"], "done") << frame.dump();
      done = frame;
    }
  }
  EXPECT_EQ(done["finish_reason"], "length");
  EXPECT_EQ(tokens, 40);
  EXPECT_TRUE(server.wait_until_idle(5s));
}

// No request, no subscription, and a client that neither sends nor reads (so answers no ping):
// after the idle timeout the server closes with a close frame that says why.
TEST(WsServerTest, AnIdleSilentClientIsClosedWithAReason) {
  HttpServerConfig config;
  config.idle_timeout = 3s;
  TestServer server(config);
  WsClient client(server.port());
  client.send(start_frame("q", 2));  // the idle time counts from the end of this request
  for (json frame = read_frame(client); frame["type"] != "done"; frame = read_frame(client)) {
    ASSERT_EQ(frame["type"], "token") << frame.dump();
  }
  // A third of an idle timeout later the connection is still open: an invalid frame is answered.
  std::this_thread::sleep_for(1s);
  client.send("{");
  const json error = read_frame(client);
  ASSERT_EQ(error["type"], "error") << error.dump() << client.ending().error;
  std::this_thread::sleep_for(6s);  // silent: the server's ping goes unanswered
  EXPECT_FALSE(client.read().has_value());
  EXPECT_EQ(client.ending().close_code, 1001) << client.ending().error;
  EXPECT_EQ(client.ending().close_reason, "idle timeout");
}

// A client that stops reading while its request streams: once one frame's write has waited
// write_timeout, the server gives up on the socket and aborts the request (long before the
// idle timeout, and before the send queue's bound would fail it as slow_reader).
TEST(WsServerTest, AClientThatStopsReadingIsCutAfterTheWriteTimeout) {
  HttpServerConfig config;
  config.write_timeout = 1s;
  // No slow_reader here: a writer slower than the engine (a Debug ASan build) would otherwise
  // fail the requests and drop their frames before the socket is full, and nothing would stall.
  config.ws_max_queued_frames = 1'000'000;
  TestServer server(config);
  WsClient client(server.port(), "/v1/stream", {}, /*receive_buffer_bytes=*/4096);
  // 96 requests of 400 tokens with 5 top logprobs (~38,000 frames of ~700 bytes) fill the
  // socket buffers (the server's grows to 4 MiB) long before they end; the client reads nothing.
  for (int i = 0; i < 96; ++i) {
    json frame = json::parse(start_frame("w" + std::to_string(i), 400));
    frame["logprobs"] = 5;
    client.send(frame.dump());
  }
  EXPECT_TRUE(server.wait_until_idle(30s)) << "the requests of a stalled socket kept running";
  bool timed_out = false;
  for (int i = 0; i < 200 && !timed_out; ++i) {
    for (const std::string& line : server.log_lines()) {
      timed_out = timed_out || line.find("(write timeout)") != std::string::npos;
    }
    std::this_thread::sleep_for(50ms);
  }
  // (ASSERT: a connection left open would block the reads below until the idle timeout.)
  ASSERT_TRUE(timed_out) << "no write-timeout close in the server log";
  // What the client still reads ends without a close frame.
  int frames = 0;
  while (client.read()) ++frames;
  EXPECT_EQ(client.ending().close_code, 0) << frames << " frames, then " << client.ending().error;
}

// A client that floods frames and reads nothing: its error frames fill the send queue, so the
// reader pauses (no read pending) until the write timeout closes the socket. The connection must
// then end (a paused reader sees the writer gone), or it would hold a graceful stop for the
// whole drain timeout.
TEST(WsServerTest, AFloodingClientThatStopsReadingEndsItsConnection) {
  HttpServerConfig config;
  config.write_timeout = 1s;
  config.ws_max_queued_frames = 8;
  config.drain_timeout = 20s;
  TestServer server(config);
  WsClient client(server.port(), "/v1/stream", {}, /*receive_buffer_bytes=*/4096);
  // Each "{" gets an error frame back; the client's writes block once both directions are full
  // and fail once the server gives up on the socket.
  int sent = 0;
  try {
    for (; sent < 2'000'000; ++sent) client.send("{");
  } catch (const std::exception&) {
  }
  ASSERT_LT(sent, 2'000'000) << "the server never stopped reading";
  const auto stop_start = std::chrono::steady_clock::now();
  server.server().stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, 10s)
      << "a connection outlived its socket and held the drain";
}

// A client that never reads: the server's queue for it stays bounded and its requests fail
// with slow_reader once the socket's buffers are full.
TEST(WsServerTest, SlowReaderIsCancelledNotBuffered) {
  HttpServerConfig config;
  config.ws_max_queued_frames = 8;
  TestServer server(config);
  WsClient client(server.port());
  constexpr int kNumRequests = 64;
  for (int i = 0; i < kNumRequests; ++i) client.send(start_frame("r" + std::to_string(i), 400));
  // Each engine step yields one event per request: far more than 8 frames at once, so requests
  // fail unless the writer keeps up (and the reader is not reading at all).
  EXPECT_TRUE(server.wait_until_idle(60s)) << "requests of a non-reading client kept running";
  std::set<std::string> ended;
  bool slow_reader_seen = false;
  while (static_cast<int>(ended.size()) < kNumRequests) {
    const json frame = read_frame(client);
    ASSERT_TRUE(frame.is_object());
    if (frame["type"] == "token") continue;
    ended.insert(frame["id"].get<std::string>());
    slow_reader_seen =
        slow_reader_seen || (frame["type"] == "error" && frame["error"]["code"] == "slow_reader");
  }
  EXPECT_TRUE(slow_reader_seen);
}

}  // namespace
}  // namespace pagedserve::net::testing
