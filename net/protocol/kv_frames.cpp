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

KvPoolFrameCache::Part make_part(const std::shared_ptr<const cache::KvMapSnapshot>& sent,
                                 const cache::KvMapSnapshot& latest) {
  KvPoolFrameCache::Part part;
  cache::KvSnapshotDiff diff;
  if (sent != nullptr && sent.get() != &latest) {
    diff = cache::diff_kv_snapshots(sent->pool, latest.pool);
  }
  part.snapshot = sent == nullptr || diff.resized;
  if (part.snapshot) {
    part.device = dump_json(occupied_json(latest.pool.device));
    part.cpu = dump_json(occupied_json(latest.pool.cpu));
  } else {  // no change at all when sent is latest: empty lists, fresh gauges
    part.device = dump_json(changed_json(diff.delta.device));
    part.cpu = dump_json(changed_json(diff.delta.cpu));
  }
  return part;
}

// The frame around a pool part: the head, the part's lists, the subscriber's own tail.
std::string assemble_frame(const KvPoolFrameCache::Part& part, const cache::KvMapSnapshot& map,
                           const actors::EngineStats& stats, const KvRequestLabels& labels,
                           int64_t t_ms) {
  std::string frame = dump_json(frame_head(part.snapshot ? "snapshot" : "delta", map, t_ms));
  frame.pop_back();  // the head's closing brace
  frame += ",\"device\":" + part.device + ",\"cpu\":" + part.cpu + ",";
  ordered_json tail;
  add_tail(tail, map, stats, labels);
  const std::string tail_text = dump_json(tail);
  frame.append(tail_text, 1);  // without its opening brace
  return frame;
}

}  // namespace

std::shared_ptr<const KvPoolFrameCache::Part> KvPoolFrameCache::get(
    const std::shared_ptr<const cache::KvMapSnapshot>& sent,
    const std::shared_ptr<const cache::KvMapSnapshot>& latest) {
  {
    std::lock_guard lock(mu_);
    for (const Entry& e : entries_) {
      if (e.sent == sent.get() && e.latest == latest.get()) return e.part;
    }
  }
  // Made outside the lock: two subscribers may both make the same part, which is harmless.
  auto part = std::make_shared<const Part>(make_part(sent, *latest));
  std::lock_guard lock(mu_);
  ++num_made_;
  entries_.push_front(Entry{sent.get(), latest.get(), sent, latest, part});
  if (entries_.size() > kCapacity) entries_.pop_back();
  return part;
}

int64_t KvPoolFrameCache::num_made() const {
  std::lock_guard lock(mu_);
  return num_made_;
}

std::string KvFeed::next_frame(std::shared_ptr<const cache::KvMapSnapshot> latest,
                               const actors::EngineStats& stats, const KvRequestLabels& labels,
                               int64_t t_ms) {
  if (latest == nullptr) return {};
  std::shared_ptr<const KvPoolFrameCache::Part> part;
  if (cache_ != nullptr) {
    part = cache_->get(sent_, latest);
  } else {
    part = std::make_shared<const KvPoolFrameCache::Part>(make_part(sent_, *latest));
  }
  std::string frame = assemble_frame(*part, *latest, stats, labels, t_ms);
  sent_ = std::move(latest);
  return frame;
}

}  // namespace pagedserve::net
