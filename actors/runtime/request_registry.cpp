// StreamState and RequestRegistry: the mutex-guarded edge between client threads and actors.
#include "actors/runtime/request_registry.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

namespace pagedserve::actors::runtime {

StreamState::StreamState(uint64_t request_id, TokenCallback callback)
    : request_id_(request_id), callback_(std::move(callback)) {}

void StreamState::push(TokenEvent event) {
  const bool final_event = event.finished;
  if (callback_) {
    {
      std::lock_guard lock(mu_);
      if (finished_) return;  // nothing may follow the final event
      finished_ = final_event;
    }
    // A client's exception must not unwind through an actor.
    try {
      callback_(std::move(event));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pagedserve: request %llu: token callback threw: %s\n",
                   static_cast<unsigned long long>(request_id_), e.what());
    } catch (...) {
      std::fprintf(stderr, "pagedserve: request %llu: token callback threw\n",
                   static_cast<unsigned long long>(request_id_));
    }
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    finished_ = final_event;
    queue_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::optional<TokenEvent> StreamState::next() {
  std::unique_lock lock(mu_);
  ready_.wait(lock, [&] { return !queue_.empty() || finished_; });
  if (queue_.empty()) return std::nullopt;
  TokenEvent event = std::move(queue_.front());
  queue_.pop_front();
  return event;
}

std::optional<TokenEvent> StreamState::try_next() {
  std::lock_guard lock(mu_);
  if (queue_.empty()) return std::nullopt;
  TokenEvent event = std::move(queue_.front());
  queue_.pop_front();
  return event;
}

bool StreamState::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

TokenEvent error_event(uint64_t request_id, std::string message) {
  TokenEvent event;
  event.request_id = request_id;
  event.finished = true;
  event.finish_reason = "error";
  event.error = std::move(message);
  return event;
}

RequestRegistry::RequestRegistry(int max_unfinished_requests)
    : max_unfinished_(static_cast<size_t>(std::max(max_unfinished_requests, 1))) {}

bool RequestRegistry::admit(std::shared_ptr<StreamState> state) {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return closed_ || live_.size() < max_unfinished_; });
  if (closed_) return false;
  const uint64_t id = state->request_id();
  live_.emplace(id, std::move(state));
  return true;
}

void RequestRegistry::finish(uint64_t request_id) {
  {
    std::lock_guard lock(mu_);
    live_.erase(request_id);
  }
  changed_.notify_all();
}

void RequestRegistry::abort(uint64_t request_id) {
  std::lock_guard lock(mu_);
  auto it = live_.find(request_id);
  if (it == live_.end()) return;
  it->second->request_cancel();
  if (abort_hook_) abort_hook_();
}

void RequestRegistry::abort_all() {
  std::lock_guard lock(mu_);
  for (auto& [id, state] : live_) state->request_cancel();
  if (abort_hook_ && !live_.empty()) abort_hook_();
}

void RequestRegistry::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  changed_.notify_all();
}

bool RequestRegistry::wait_until_empty(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return changed_.wait_until(lock, deadline, [&] { return live_.empty(); });
}

void RequestRegistry::fail_all(const std::string& message) {
  std::vector<std::shared_ptr<StreamState>> left;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, state] : live_) left.push_back(std::move(state));
    live_.clear();
  }
  changed_.notify_all();
  for (auto& state : left) state->push(error_event(state->request_id(), message));
}

int RequestRegistry::num_unfinished() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(live_.size());
}

void RequestRegistry::set_abort_hook(std::function<void()> hook) {
  std::lock_guard lock(mu_);
  abort_hook_ = std::move(hook);
}

}  // namespace pagedserve::actors::runtime
