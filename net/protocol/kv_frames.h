// The WebSocket "kv" topic (docs/websocket-protocol.md, "The KV block map"): the frames that
// show the paged KV pools and the engine's gauges to a subscriber (the playground page), as
// pure functions plus KvFeed, which remembers what one subscriber was sent so the next frame
// is a delta against it. The transport (net/server/ws_session.cpp) decides when to send: at most
// one frame per 100 ms, never more than one queued per connection (a slow client gets fewer,
// larger deltas; memory stays one snapshot per subscriber). No I/O; the connection's strand.
//
// Server frames:
//   {"type": "kv", "kind": "snapshot" | "delta", "version", "t_ms", "block_size",
//    "num_device_blocks", "num_cpu_blocks",
//    "device": [block...], "cpu": [block...],   snapshot: every block not plain free;
//                                               delta: every block that changed
//    "seqs": [{"seq", "request", "id"}...],      sequences holding blocks; id: this
//                                               connection's client id for the request, or null
//    "stats": {gauges}}
//   block: {"i": id, "s": "free" | "cached" | "used", "r": ref count, "t": tokens,
//           "h": "hash hex (16 digits)" or null, "o": [owner seq ids]}
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "actors/engine.h"
#include "cache/kv_snapshot.h"

namespace pagedserve::net {

// Engine request id -> the subscriber's name for it (its client id; "<id>/<prompt index>" for
// the later prompts of a request with several).
using KvRequestLabels = std::map<uint64_t, std::string>;

// The costly half of a kv frame, its pools ("device" and "cpu", as JSON text), depends only on
// the snapshot a subscriber was last sent and the latest one; subscribers in step (the usual
// case: they all read at the pace of the same 100 ms ticks) share it instead of each diffing
// the pools and serialising the same blocks. Keeps the last few parts made. Thread-safe (the
// server's io threads share one).
class KvPoolFrameCache {
 public:
  struct Part {
    bool snapshot = false;  // a full picture (first frame, or the pools changed size)
    std::string device;     // JSON array text
    std::string cpu;
  };
  // The part bringing a subscriber from `sent` (null: nothing yet) to `latest`.
  std::shared_ptr<const Part> get(const std::shared_ptr<const cache::KvMapSnapshot>& sent,
                                  const std::shared_ptr<const cache::KvMapSnapshot>& latest);
  int64_t num_made() const;  // parts computed (not served from the cache), for tests

 private:
  struct Entry {
    const cache::KvMapSnapshot* sent;  // identities: a snapshot is immutable once published
    const cache::KvMapSnapshot* latest;
    std::shared_ptr<const cache::KvMapSnapshot> keep_sent, keep_latest;  // pins the addresses
    std::shared_ptr<const Part> part;
  };
  static constexpr size_t kCapacity = 8;
  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // newest first
  int64_t num_made_ = 0;
};

// What one subscriber has been sent.
class KvFeed {
 public:
  // cache (not owned; may be null) shares the pool half of frames with other subscribers.
  explicit KvFeed(KvPoolFrameCache* cache = nullptr) : cache_(cache) {}

  // The frame that brings the subscriber to `latest`: a snapshot first (and whenever the pools
  // changed size), then deltas; a delta with no block changes still carries fresh gauges.
  // "" while nothing has been published (latest null). Remembers `latest` as sent.
  std::string next_frame(std::shared_ptr<const cache::KvMapSnapshot> latest,
                         const actors::EngineStats& stats, const KvRequestLabels& labels,
                         int64_t t_ms);
  // Forget what was sent (a new subscribe): the next frame is a full snapshot.
  void reset() { sent_.reset(); }

 private:
  KvPoolFrameCache* cache_;
  std::shared_ptr<const cache::KvMapSnapshot> sent_;
};

}  // namespace pagedserve::net
