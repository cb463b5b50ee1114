// KvMapBoard: where the prefix-cache actor publishes KV block maps (cache/kv_snapshot.h) for
// observers (the playground's "kv" WebSocket topic), and how observers say they are watching.
// Written by the prefix-cache thread, read by any client thread; one mutex held for a pointer
// swap. Nothing is published while nobody subscribes, so an unwatched engine pays nothing.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "cache/kv_snapshot.h"

namespace pagedserve::actors::runtime {

class KvMapBoard {
 public:
  void add_subscriber() { subscribers_.fetch_add(1); }
  void remove_subscriber() {
    if (subscribers_.fetch_sub(1) == 1) {
      // Nobody watches: drop the picture, so the next subscriber never starts from a stale one.
      std::lock_guard lock(mu_);
      latest_.reset();
    }
  }
  bool wanted() const { return subscribers_.load() > 0; }
  int num_subscribers() const { return subscribers_.load(); }

  void publish(std::shared_ptr<const cache::KvMapSnapshot> map) {
    std::lock_guard lock(mu_);
    latest_ = std::move(map);
  }
  // Null before the first publish after a subscriber arrived.
  std::shared_ptr<const cache::KvMapSnapshot> latest() const {
    std::lock_guard lock(mu_);
    return latest_;
  }

 private:
  std::atomic<int> subscribers_{0};
  mutable std::mutex mu_;
  std::shared_ptr<const cache::KvMapSnapshot> latest_;
};

}  // namespace pagedserve::actors::runtime
