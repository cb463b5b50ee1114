// The KV-cache event wire format (see kv_event_wire.h).
#include "net/kv_events/kv_event_wire.h"

#include <stdexcept>
#include <type_traits>
#include <variant>

#include "net/kv_events/msgpack_writer.h"

namespace pagedserve::net {
namespace {

void write_hashes(MsgpackWriter& out, const std::vector<cache::BlockHash>& hashes) {
  out.array_header(static_cast<uint32_t>(hashes.size()));
  for (const cache::BlockHash& hash : hashes) out.fixed_uint64(wire_block_hash(hash));
}

void write_event(MsgpackWriter& out, const cache::KvCacheEvent& event, int block_size) {
  std::visit(
      [&](const auto& e) {
        using Event = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<Event, cache::KvBlockStored>) {
          out.array_header(7);
          out.str("BlockStored");
          write_hashes(out, e.block_hashes);
          if (e.parent) {
            out.fixed_uint64(wire_block_hash(*e.parent));
          } else {
            out.nil();
          }
          out.array_header(static_cast<uint32_t>(e.token_ids.size()));
          for (int32_t token : e.token_ids) out.integer(token);
          out.integer(block_size);
          out.nil();  // lora_id: no adapters
          out.str(kKvEventMediumGpu);
        } else if constexpr (std::is_same_v<Event, cache::KvBlockRemoved>) {
          out.array_header(3);
          out.str("BlockRemoved");
          write_hashes(out, e.block_hashes);
          out.str(kKvEventMediumGpu);
        } else {
          out.array_header(1);
          out.str("AllBlocksCleared");
        }
      },
      event);
}

}  // namespace

std::string kv_events_topic(std::string_view pod_id, std::string_view model) {
  for (auto [what, value] : {std::pair{"pod id", pod_id}, std::pair{"model name", model}}) {
    if (value.empty() || value.find('@') != std::string_view::npos) {
      throw std::invalid_argument(std::string("KV-cache events: the ") + what + " '" +
                                  std::string(value) +
                                  "' must be non-empty and without '@' (topic kv@<pod>@<model>)");
    }
  }
  return "kv@" + std::string(pod_id) + "@" + std::string(model);
}

std::string encode_kv_event_batch(const actors::KvEventBatch& batch,
                                  const KvEventWireOptions& options) {
  MsgpackWriter out;
  out.array_header(3);
  out.float64(batch.timestamp_s);
  out.array_header(static_cast<uint32_t>(batch.events.size()));
  for (const cache::KvCacheEvent& event : batch.events) write_event(out, event, options.block_size);
  if (options.data_parallel_rank) {
    out.integer(*options.data_parallel_rank);
  } else {
    out.nil();
  }
  return out.take();
}

std::string sequence_frame(int64_t seq) {
  std::string frame(8, '\0');
  const auto bits = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) frame[i] = static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
  return frame;
}

bool kv_events_endpoint_binds(std::string_view endpoint) {
  return endpoint.find('*') != std::string_view::npos ||
         endpoint.find("::") != std::string_view::npos || endpoint.starts_with("ipc://") ||
         endpoint.starts_with("inproc://");
}

}  // namespace pagedserve::net
