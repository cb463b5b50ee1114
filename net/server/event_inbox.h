// EventInbox: one HTTP generation's engine events, queued on the connection's strand for the
// session coroutine. The engine's callbacks (tokenizer thread) post into it through the
// server's PostGate; the session waits on it with a timer used as a wake-up (a cancelled
// timer). Callbacks hold it weakly (server_state.h: PostGate). Also woken by the peer watcher
// (client gone) and a hard server stop. Bounded for SSE (limit()). Strand only, except
// callback(), which any thread may call.
// Internal to net/server.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "actors/engine.h"
#include "net/server/server_state.h"

namespace pagedserve::net {

struct PromptEvent {
  size_t prompt_index = 0;
  actors::TokenEvent event;
};

class EventInbox : public std::enable_shared_from_this<EventInbox> {
 public:
  explicit EventInbox(const asio::any_io_executor& strand) : strand_(strand), timer_(strand) {}

  // Prompt `prompt_index`'s engine callback: posts each event to the strand (never blocks).
  actors::TokenCallback callback(std::shared_ptr<PostGate> gate, size_t prompt_index) {
    return
        [gate = std::move(gate), inbox = weak_from_this(), prompt_index](actors::TokenEvent event) {
          gate->post(inbox, [prompt_index, event = std::move(event)](EventInbox& target) mutable {
            target.push(PromptEvent{prompt_index, std::move(event)});
          });
        };
  }
  const asio::any_io_executor& strand() const { return strand_; }

  // ---- strand only ----
  // Bounds the queue (SSE backpressure): while the session waits on a slow reader's socket,
  // events pile up here. One beyond `max_events` overflows the inbox: the queue is dropped,
  // later events are too, `on_overflow` runs once (it aborts the engine requests, so their KV
  // blocks are freed now rather than when the write times out) and the session is woken.
  void limit(size_t max_events, std::function<void()> on_overflow) {
    max_events_ = max_events;
    on_overflow_ = std::move(on_overflow);
  }
  bool overflowed() const { return overflowed_; }
  void push(PromptEvent event) {
    if (overflowed_) return;
    if (max_events_ > 0 && events_.size() >= max_events_) {
      overflowed_ = true;
      events_.clear();
      if (on_overflow_) std::exchange(on_overflow_, {})();
      wake();
      return;
    }
    events_.push_back(std::move(event));
    wake();
  }
  std::deque<PromptEvent> take() { return std::exchange(events_, {}); }
  bool empty() const { return events_.empty(); }
  // Ends the current (or next) wait() early.
  void wake() {
    notified_ = true;
    timer_.cancel();
  }
  // Returns when events are queued or wake() was called since the last wait().
  asio::awaitable<void> wait() {
    if (events_.empty() && !notified_) {
      timer_.expires_after(std::chrono::hours(24));
      co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    notified_ = false;
  }

 private:
  asio::any_io_executor strand_;
  asio::steady_timer timer_;
  std::deque<PromptEvent> events_;
  bool notified_ = false;
  size_t max_events_ = 0;  // 0: unbounded (a non-streaming response drains it at once)
  bool overflowed_ = false;
  std::function<void()> on_overflow_;
};

}  // namespace pagedserve::net
