// The client-facing edge of the engine, shared by Engine (client threads), RequestStream and
// the tokenizer actor: StreamState is one request's event queue (or callback) plus its
// cancellation flag; RequestRegistry tracks every unfinished request, bounds how many there
// may be (submit blocks beyond that: the engine's backpressure) and routes aborts. Both are
// plain mutex-guarded classes with no Asio, safe from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <unordered_map>

#include "actors/engine.h"

namespace pagedserve::actors::runtime {

// One request's output. Single producer at a time (submit for an immediate error, else the
// tokenizer actor); any number of consumers.
class StreamState {
 public:
  StreamState(uint64_t request_id, TokenCallback callback);

  uint64_t request_id() const { return request_id_; }
  // Queues the event, or hands it to the callback (outside the lock). The event with
  // finished = true must be the last one.
  void push(TokenEvent event);
  std::optional<TokenEvent> next();
  std::optional<TokenEvent> try_next();
  bool finished() const;

  // Cancellation travels with the request (to the tokenizer and scheduler actors) as a
  // stop_token, so an abort that races the request through the pipeline is never lost.
  std::stop_token cancel_token() const { return cancel_.get_token(); }
  void request_cancel() { cancel_.request_stop(); }

 private:
  const uint64_t request_id_;
  const TokenCallback callback_;
  std::stop_source cancel_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<TokenEvent> queue_;
  bool finished_ = false;
};

// A final event that carries only an error.
TokenEvent error_event(uint64_t request_id, std::string message);

class RequestRegistry {
 public:
  explicit RequestRegistry(int max_unfinished_requests);

  // Registers the request, blocking while max_unfinished_requests are unfinished. Returns
  // false (registering nothing) once close() was called.
  bool admit(std::shared_ptr<StreamState> state);
  // The request's final event has been pushed: it no longer counts.
  void finish(uint64_t request_id);
  // Cancels the request and wakes the scheduler; a no-op for an unknown id.
  void abort(uint64_t request_id);
  void abort_all();
  // Stops admitting and wakes every blocked admit().
  void close();
  // True when every request finished before the deadline.
  bool wait_until_empty(std::chrono::steady_clock::time_point deadline);
  // Ends every request still registered with an error event (after the actors are gone).
  void fail_all(const std::string& message);
  int num_unfinished() const;

  // Called (under the registry's lock, so it must not block) after a request is cancelled;
  // the engine points it at the scheduler actor's wake-up. An empty function disconnects it.
  void set_abort_hook(std::function<void()> hook);

 private:
  const size_t max_unfinished_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<uint64_t, std::shared_ptr<StreamState>> live_;
  bool closed_ = false;
  std::function<void()> abort_hook_;
};

}  // namespace pagedserve::actors::runtime
