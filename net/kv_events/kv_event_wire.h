// The KV-cache event wire format of vLLM's ZmqEventPublisher, as llm-d's KV-cache indexer
// decodes it (llm-d-kv-cache-manager, pkg/kvcache/kvevents). One ZeroMQ message per batch, three
// frames: [topic, sequence number (8 bytes, big-endian), payload]. The topic is
// "kv@<pod-id>@<model>" (the indexer splits it on '@'). The payload is MessagePack in array
// form (msgspec's array_like=True; a tagged union puts its tag first):
//   [timestamp (float64 seconds), [event, ...], data_parallel_rank (int, or nil)]
//   ["BlockStored", [hash, ...], parent_hash or nil, [token_id, ...], block_size, lora_id (nil),
//    medium]
//   ["BlockRemoved", [hash, ...], medium]
//   ["AllBlocksCleared"]
// Block hashes: our BlockHash is 128 bits (XXH3-128, cache/block_hash.h); the wire carries its
// low 64 bits as a MessagePack uint64 (0xcf, always 8 bytes). vLLM's older releases sent ints,
// its newer ones bytes; the indexer accepts uint64, int64 or bytes (it reads bytes' last 8 as
// a big-endian uint64), and keys its index by that uint64. Medium: always "GPU", the pool the
// prefix cache indexes (CPU swap blocks are never indexed, so never reported; see
// docs/kv-events.md). Pure: no sockets here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "actors/kv_event_publisher.h"
#include "cache/block_hash.h"

namespace pagedserve::net {

inline constexpr std::string_view kKvEventMediumGpu = "GPU";

// The uint64 a block hash is sent as (and the indexer keys it by).
inline uint64_t wire_block_hash(const cache::BlockHash& hash) { return hash.low64; }

// "kv@<pod_id>@<model>". Throws std::invalid_argument when either is empty or holds '@' (the
// indexer could not split the topic back).
std::string kv_events_topic(std::string_view pod_id, std::string_view model);

struct KvEventWireOptions {
  int block_size = 16;  // tokens per block: each BlockStored carries it
  // vLLM's publisher stamps its data-parallel rank (0 without data parallelism).
  std::optional<int> data_parallel_rank = 0;
};

// The payload frame of one batch.
std::string encode_kv_event_batch(const actors::KvEventBatch& batch,
                                  const KvEventWireOptions& options);

// The sequence-number frame: 8 bytes, big-endian (signed: the replay's end marker is -1).
std::string sequence_frame(int64_t seq);

// vLLM's rule for its PUB endpoint: bind when the address is a wildcard ('*' or '::') or a
// local transport (ipc://, inproc://), else connect (llm-d's indexer binds its SUB socket and
// every engine connects to it).
bool kv_events_endpoint_binds(std::string_view endpoint);

}  // namespace pagedserve::net
