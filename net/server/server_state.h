// ServerState: what every connection of one HttpServer shares: the engine, the served model,
// the metrics registry, admission control (429 beyond --max-queued-requests), the registry of
// open connections (for shutdown), the gate through which engine callbacks post to
// connection strands, and the log. Internal to net/server (includes Asio).
//
// Thread safety: every method may be called from any thread (io threads, the engine's
// tokenizer thread, the controlling thread); mutable state is atomic or behind a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>

#include "actors/engine.h"
#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/kv_frames.h"
#include "net/protocol/metrics.h"
#include "net/protocol/served_model.h"
#include "net/server/http_server.h"
#include "net/server/router.h"

namespace pagedserve::net {

namespace asio = boost::asio;

// Engine callbacks may run after a connection (or the whole io_context) is gone, so they hold
// no Asio object: only this gate (shared) and a weak pointer to their target, which must have
// strand(). The gate drops posts once the server closed it (before its io_context dies), and
// a post whose target is gone, or dies before the handler runs, does nothing.
class PostGate {
 public:
  template <class Target, class Fn>
  void post(const std::weak_ptr<Target>& target, Fn fn) {
    std::lock_guard lock(mu_);
    if (!open_) return;
    const std::shared_ptr<Target> strong = target.lock();
    if (!strong) return;
    asio::post(strong->strand(), [target, fn = std::move(fn)]() mutable {
      if (const std::shared_ptr<Target> alive = target.lock()) fn(*alive);
    });
  }
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  bool open_ = true;
};

class ServerState {
 public:
  ServerState(actors::Engine& engine, HttpServerConfig config);

  actors::Engine& engine() const { return engine_; }
  const HttpServerConfig& config() const { return config_; }
  const ServedModel& served() const { return served_; }
  const AccessPolicy& access() const { return access_; }
  Metrics& metrics() { return *metrics_; }
  const MetricsExposition& metrics_exposition() const { return exposition_; }
  const std::shared_ptr<PostGate>& gate() const { return gate_; }
  // The "kv" topic's subscribers share the pool half of their frames (net/protocol/kv_frames.h).
  KvPoolFrameCache& kv_pool_frames() { return kv_pool_frames_; }

  // ---- admission ----
  // The engine's own entry check (actors::check_request: e.g. n above max_num_seqs) run
  // before submitting, so such a client error is a 400 rather than the engine's error event
  // (a 500).
  std::optional<ApiError> check(const GenerationRequest& request) const;
  // Reserves room for `num_requests` engine requests, or returns the 429 to answer.
  std::optional<ApiError> admit(size_t num_requests);
  int num_in_flight() const { return in_flight_->load(); }
  // Submits every prompt of `request` (moving them out). make_callback(i) builds prompt i's
  // callback, which must only post to a strand; the wrapper adds the admission release on the
  // final event. Call after admit(request.prompts.size()) succeeded.
  std::vector<std::shared_ptr<actors::RequestStream>> submit(
      GenerationRequest& request,
      const std::function<actors::TokenCallback(size_t prompt_index)>& make_callback);

  // ---- connections ----
  // `on_stop(hard)` runs on the connection's strand when the server stops: graceful (hard =
  // false: finish the response in flight, then close) and, after drain_timeout, hard (abort
  // and close now). Returns the id to remove with.
  uint64_t add_connection(asio::any_io_executor strand, std::function<void(bool hard)> on_stop);
  void remove_connection(uint64_t id);
  void stop_connections(bool hard);
  void clear_connections();  // before the io_context dies (the strands must go first)
  size_t num_connections() const;
  bool stopping() const { return stopping_.load(); }

  void log(std::string_view line) const;

 private:
  struct Connection {
    asio::any_io_executor strand;
    std::function<void(bool)> on_stop;
  };

  actors::Engine& engine_;
  const HttpServerConfig config_;
  const ServedModel served_;
  const AccessPolicy access_;
  const MetricsExposition exposition_;
  // Shared with engine callbacks, which may outlive the server (see PostGate).
  const std::shared_ptr<Metrics> metrics_ = std::make_shared<Metrics>();
  const std::shared_ptr<PostGate> gate_ = std::make_shared<PostGate>();
  // Engine requests submitted whose final event has not been seen (shared with callbacks).
  const std::shared_ptr<std::atomic<int>> in_flight_ = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> stopping_{false};
  KvPoolFrameCache kv_pool_frames_;
  mutable std::mutex connections_mu_;
  std::map<uint64_t, Connection> connections_;
  uint64_t next_connection_id_ = 1;
};

// 429 body for an overloaded server (code "overloaded"); the transport adds Retry-After.
ApiError overloaded_error(int num_waiting, int max_queued);

}  // namespace pagedserve::net
