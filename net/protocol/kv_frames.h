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
#include <map>
#include <memory>
#include <string>

#include "actors/engine.h"
#include "cache/kv_snapshot.h"

namespace pagedserve::net {

// Engine request id -> the subscriber's name for it (its client id; "<id>/<prompt index>" for
// the later prompts of a request with several).
using KvRequestLabels = std::map<uint64_t, std::string>;

std::string ws_kv_snapshot_frame(const cache::KvMapSnapshot& map, const actors::EngineStats& stats,
                                 const KvRequestLabels& labels, int64_t t_ms);
std::string ws_kv_delta_frame(const cache::KvMapSnapshot& map, const cache::KvSnapshotDelta& delta,
                              const actors::EngineStats& stats, const KvRequestLabels& labels,
                              int64_t t_ms);

// What one subscriber has been sent.
class KvFeed {
 public:
  // The frame that brings the subscriber to `latest`: a snapshot first (and whenever the pools
  // changed size), then deltas; a delta with no block changes still carries fresh gauges.
  // "" while nothing has been published (latest null). Remembers `latest` as sent.
  std::string next_frame(std::shared_ptr<const cache::KvMapSnapshot> latest,
                         const actors::EngineStats& stats, const KvRequestLabels& labels,
                         int64_t t_ms);
  // Forget what was sent (a new subscribe): the next frame is a full snapshot.
  void reset() { sent_.reset(); }

 private:
  std::shared_ptr<const cache::KvMapSnapshot> sent_;
};

}  // namespace pagedserve::net
