// A minimal fake OpenAI-compatible server for the load generator's tests (raw Asio, no Beast):
// POST /v1/completions streams SSE chunks, the first after ttft, then one token every itl
// (max_tokens of them), then a usage chunk and [DONE]. It records when each request arrived
// and how many were in flight at most. Runs on its own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pagedserve::loadgen::testing {

struct FakeServerOptions {
  std::chrono::milliseconds ttft{50};
  std::chrono::milliseconds itl{10};
  int fail_every = 0;  // every k-th request (1-based) gets a 503; 0 = never
};

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerOptions options);
  ~FakeOpenAiServer();

  std::string base_url() const;
  // steady_clock times at which request bodies were read, in arrival order.
  std::vector<std::chrono::steady_clock::time_point> arrivals() const;
  int max_in_flight() const { return max_in_flight_.load(); }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<int> max_in_flight_{0};
};

}  // namespace pagedserve::loadgen::testing
