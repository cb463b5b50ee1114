// Many clients at once: 200 concurrent streaming completions, a random third of which
// disconnect midway, on one and on two io threads. Afterwards every KV block is free again
// (pagedserve_kv_blocks_free == pagedserve_kv_blocks_total on /metrics), each request is
// counted once in pagedserve_request_success_total (the disconnected ones as "abort") and
// the server still answers.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <thread>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kNumClients = 200;
constexpr int kMaxTokens = 96;

struct ClientOutcome {
  bool ok = false;
  std::string problem;
};

// Streams one completion; a leaver disconnects after `leave_after` events.
ClientOutcome run_client(uint16_t port, int leave_after) {
  const std::string body = json{{"prompt", "Once upon a time"},
                                {"max_tokens", kMaxTokens},
                                {"ignore_eos", true},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}}
                               .dump();
  SseClient client(port, "/v1/completions", body);
  if (client.status() != 200) return {false, "status " + std::to_string(client.status())};
  std::vector<std::string> events;
  while (std::optional<std::string> event = client.next_event()) {
    events.push_back(*event);
    if (leave_after > 0 && static_cast<int>(events.size()) == leave_after) {
      client.disconnect();
      return {true, ""};
    }
  }
  if (events.size() < 3 || events.back() != "[DONE]") return {false, "stream did not end"};
  const json usage = json::parse(events[events.size() - 2])["usage"];
  if (usage["completion_tokens"] != kMaxTokens) return {false, "usage " + usage.dump()};
  return {true, ""};
}

void run_load_test(int num_io_threads) {
  HttpServerConfig config;
  config.num_io_threads = num_io_threads;
  TestServer server(config);
  std::vector<int> leave_after(kNumClients, 0);
  std::vector<int> order(kNumClients);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(20240611);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> midway(2, kMaxTokens / 2);
  for (int i = 0; i < kNumClients / 3; ++i) leave_after[order[i]] = midway(rng);

  std::vector<ClientOutcome> outcomes(kNumClients);
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kNumClients; ++i) {
      threads.emplace_back([&, i] {
        try {
          outcomes[i] = run_client(server.port(), leave_after[i]);
        } catch (const std::exception& e) {
          outcomes[i] = {false, e.what()};
        }
      });
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int num_aborted = 0;  // leavers whose request was still generating (logged as 499)
  for (const std::string& line : server.log_lines())
    num_aborted += line.find("\" 499 ") != std::string::npos;
  std::cout << "[ load ] " << kNumClients << " streaming clients x " << kMaxTokens << " tokens ("
            << kNumClients / 3 << " leaving midway, " << num_aborted << " aborted mid-stream), "
            << num_io_threads << " io threads, in " << seconds << " s\n";
  for (int i = 0; i < kNumClients; ++i)
    EXPECT_TRUE(outcomes[i].ok) << i << ": " << outcomes[i].problem;

  ASSERT_TRUE(server.wait_until_idle(30s));
  const HttpResult metrics = http_request(server.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metric_value(metrics.body, "pagedserve_kv_blocks_free"),
            metric_value(metrics.body, "pagedserve_kv_blocks_total"));
  // Every request is counted once by how it ended: those cut off by their client's disconnect
  // as "abort", the rest as "length". A leaver is logged 499 whenever its response was cut
  // short, but when the writer lags the engine by more than the tokens left (a slow io thread:
  // sanitizer builds), the engine has already finished it as "length" when the disconnect is
  // seen; so every abort is a 499, not every 499 an abort.
  const auto finished = [&](const std::string& reason) {
    return metric_value(metrics.body,
                        "pagedserve_request_success_total{finish_reason=\"" + reason + "\"}")
        .value_or(-1);
  };
  EXPECT_LE(num_aborted, kNumClients / 3);  // only leavers are cut short
  EXPECT_LE(finished("abort"), num_aborted);
  EXPECT_GT(finished("abort"), 0);
  EXPECT_EQ(finished("abort") + finished("length"), kNumClients);
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
  EXPECT_EQ(http_request(server.port(), "POST", "/v1/completions",
                         R"({"prompt": "Once", "max_tokens": 2})")
                .status,
            200);
}

TEST(LoadTest, TwoHundredStreamingClientsAThirdDisconnecting) { run_load_test(1); }

// The same with two io threads: connections on different threads, one engine and one metrics
// registry between them.
TEST(LoadTest, TwoHundredStreamingClientsOnTwoIoThreads) { run_load_test(2); }

// A non-blocking connect to 127.0.0.1:port; -1 if the socket could not be made.
int start_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);  // EINPROGRESS
  return fd;
}

// How many of `fds` finish their handshake before `timeout` passes.
int count_connected(const std::vector<int>& fds, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> done(fds.size(), false);
  int connected = 0;
  while (connected < static_cast<int>(fds.size()) && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> polled;
    std::vector<size_t> which;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!done[i]) {
        polled.push_back({fds[i], POLLOUT, 0});
        which.push_back(i);
      }
    }
    ::poll(polled.data(), polled.size(), 50);
    for (size_t k = 0; k < polled.size(); ++k) {
      if ((polled[k].revents & POLLOUT) == 0) continue;
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(polled[k].fd, SOL_SOCKET, SO_ERROR, &error, &length);
      done[which[k]] = true;
      if (error == 0) ++connected;
    }
  }
  return connected;
}

// GET /health on a connected socket (made blocking); the status line's code, 0 on failure.
int health_status(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  const std::string request = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return 0;
  }
  char head[13] = {};
  size_t got = 0;
  while (got < 12) {
    const ssize_t n = ::recv(fd, head + got, 12 - got, 0);
    if (n <= 0) return 0;
    got += static_cast<size_t>(n);
  }
  return std::string_view(head, 9) == "HTTP/1.1 " ? std::atoi(head + 9) : 0;
}

// The listener has a thread of its own: with the only io thread held (inside the log call of
// a request), many more connections than the kernel's accept queue holds (backlog 4) still
// complete their handshake, and each is answered once the io thread is free. With the accept
// loop on the io thread only about backlog + 1 would connect: the kernel drops further SYNs,
// which is how a loaded machine turned overload into resets instead of 429s (chaos soak).
TEST(Listener, AcceptsWhileTheIoThreadIsBusy) {
  HttpServerConfig config;
  config.listen_backlog = 4;
  TestServer server(config);
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> hold{true};
  server.set_log_hook([&] {
    if (!hold.exchange(false)) return;
    entered.set_value();
    released.wait();
  });
  auto first = std::async(std::launch::async,
                          [&] { return http_request(server.port(), "GET", "/health", "").status; });
  ASSERT_EQ(entered.get_future().wait_for(20s), std::future_status::ready);

  constexpr int kConnections = 64;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) fds.push_back(start_connect(server.port()));
  ASSERT_TRUE(std::none_of(fds.begin(), fds.end(), [](int fd) { return fd < 0; }));
  const int connected = count_connected(fds, 10s);
  release.set_value();
  EXPECT_EQ(first.get(), 200);
  EXPECT_EQ(connected, kConnections)
      << "connections through a backlog of 4 with the io thread held";
  int answered = 0;
  for (int fd : fds) {
    if (health_status(fd) == 200) ++answered;
    ::close(fd);
  }
  EXPECT_EQ(answered, connected);
}

}  // namespace
}  // namespace pagedserve::net::testing
