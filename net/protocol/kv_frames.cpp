// The "kv" topic's frames (see kv_frames.h).
#include "net/protocol/kv_frames.h"

#include <cstdio>

#include "net/protocol/api_error.h"

namespace pagedserve::net {

using nlohmann::ordered_json;

namespace {

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

ordered_json block_json(cache::BlockId id, const cache::KvBlockView& view) {
  ordered_json block;
  block["i"] = id;
  block["s"] = cache::kv_block_state_name(view.state);
  block["r"] = view.ref_count;
  block["t"] = view.num_tokens;
  block["h"] = view.has_hash ? ordered_json(hex64(view.hash)) : ordered_json();
  block["o"] = view.owners;
  return block;
}

ordered_json stats_json(const actors::EngineStats& stats) {
  return {
      {"running", stats.num_running_seqs},
      {"waiting", stats.num_waiting_seqs},
      {"swapped", stats.num_swapped_seqs},
      {"unfinished_requests", stats.num_unfinished_requests},
      {"blocks_total", stats.num_kv_blocks_total},
      {"blocks_used", stats.num_kv_blocks_used},
      {"blocks_cached", stats.num_kv_blocks_cached},
      {"kv_usage", stats.num_kv_blocks_total == 0
                       ? 0.0
                       : static_cast<double>(stats.num_kv_blocks_used) / stats.num_kv_blocks_total},
      {"prefix_queries_tokens", stats.prefix_cache_queries_tokens},
      {"prefix_hits_tokens", stats.prefix_cache_hits_tokens},
      {"generated_tokens", stats.num_generated_tokens},
      {"preemptions_swap", stats.num_preemptions_swap},
      {"preemptions_recompute", stats.num_preemptions_recompute}};
}

ordered_json frame_head(std::string_view kind, const cache::KvMapSnapshot& map, int64_t t_ms) {
  ordered_json frame;
  frame["type"] = "kv";
  frame["kind"] = kind;
  frame["version"] = map.version;
  frame["t_ms"] = t_ms;
  frame["block_size"] = map.pool.block_size;
  frame["num_device_blocks"] = map.pool.device.size();
  frame["num_cpu_blocks"] = map.pool.cpu.size();
  return frame;
}

void add_tail(ordered_json& frame, const cache::KvMapSnapshot& map,
              const actors::EngineStats& stats, const KvRequestLabels& labels) {
  ordered_json seqs = ordered_json::array();
  for (const auto& [seq, request] : map.seq_requests) {
    const auto label = labels.find(request);
    seqs.push_back({{"seq", seq},
                    {"request", request},
                    {"id", label == labels.end() ? ordered_json() : ordered_json(label->second)}});
  }
  frame["seqs"] = std::move(seqs);
  frame["stats"] = stats_json(stats);
}

ordered_json changed_json(
    const std::vector<std::pair<cache::BlockId, cache::KvBlockView>>& blocks) {
  ordered_json list = ordered_json::array();
  for (const auto& [id, view] : blocks) list.push_back(block_json(id, view));
  return list;
}

ordered_json occupied_json(const std::vector<cache::KvBlockView>& pool) {
  ordered_json list = ordered_json::array();
  for (size_t id = 0; id < pool.size(); ++id) {
    const cache::KvBlockView& view = pool[id];
    if (view.state != cache::KvBlockState::kFree || view.has_hash) {
      list.push_back(block_json(static_cast<cache::BlockId>(id), view));
    }
  }
  return list;
}

}  // namespace

std::string ws_kv_snapshot_frame(const cache::KvMapSnapshot& map, const actors::EngineStats& stats,
                                 const KvRequestLabels& labels, int64_t t_ms) {
  ordered_json frame = frame_head("snapshot", map, t_ms);
  frame["device"] = occupied_json(map.pool.device);
  frame["cpu"] = occupied_json(map.pool.cpu);
  add_tail(frame, map, stats, labels);
  return dump_json(frame);
}

std::string ws_kv_delta_frame(const cache::KvMapSnapshot& map, const cache::KvSnapshotDelta& delta,
                              const actors::EngineStats& stats, const KvRequestLabels& labels,
                              int64_t t_ms) {
  ordered_json frame = frame_head("delta", map, t_ms);
  frame["device"] = changed_json(delta.device);
  frame["cpu"] = changed_json(delta.cpu);
  add_tail(frame, map, stats, labels);
  return dump_json(frame);
}

std::string KvFeed::next_frame(std::shared_ptr<const cache::KvMapSnapshot> latest,
                               const actors::EngineStats& stats, const KvRequestLabels& labels,
                               int64_t t_ms) {
  if (latest == nullptr) return {};
  std::string frame;
  if (sent_ == nullptr) {
    frame = ws_kv_snapshot_frame(*latest, stats, labels, t_ms);
  } else if (sent_ == latest) {
    frame = ws_kv_delta_frame(*latest, {}, stats, labels, t_ms);  // gauges only
  } else {
    const cache::KvSnapshotDiff diff = cache::diff_kv_snapshots(sent_->pool, latest->pool);
    frame = diff.resized ? ws_kv_snapshot_frame(*latest, stats, labels, t_ms)
                         : ws_kv_delta_frame(*latest, diff.delta, stats, labels, t_ms);
  }
  sent_ = std::move(latest);
  return frame;
}

}  // namespace pagedserve::net
