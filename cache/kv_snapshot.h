// A read-only picture of the paged KV pools for observers (the playground's block map, served
// as the WebSocket "kv" topic): per block its state, reference count, holders, fill and hash
// (KvPoolSnapshot, taken by BlockManager::snapshot()), the change between two pictures
// (diff_kv_snapshots), and which request each sequence belongs to (KvSeqRequests, fed with the
// memory ops the prefix-cache actor applies). Pure values and logic: no threads, no I/O.
//
// The snapshot is taken on demand (at most ~10 times a second while someone watches), never by
// hooking the manager's mutations: reading every block and every table entry once is O(blocks +
// table entries) and costs nothing while nobody subscribes.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_types.h"

namespace pagedserve::cache {

struct KvMemoryOp;

// A device block is exactly one of these (BlockPool's states); a CPU block is free or used.
enum class KvBlockState : uint8_t {
  kFree,    // in the free queue, holding nothing reusable
  kCached,  // in the free queue but still indexed by the prefix cache: evictable, reusable
  kUsed,    // held by at least one sequence's block table
};
const char* kv_block_state_name(KvBlockState state);  // "free", "cached", "used"

struct KvBlockView {
  KvBlockState state = KvBlockState::kFree;
  int ref_count = 0;   // block tables holding it (0 unless used)
  int num_tokens = 0;  // filled slots: used blocks their fill, cached blocks full, free 0
  bool has_hash = false;
  uint64_t hash = 0;          // the low 64 bits of the block's prefix hash, when has_hash
  std::vector<SeqId> owners;  // the sequences whose tables hold it, ascending
  friend bool operator==(const KvBlockView&, const KvBlockView&) = default;
};

struct KvPoolSnapshot {
  int block_size = 0;
  std::vector<KvBlockView> device;  // index = device block id
  std::vector<KvBlockView> cpu;     // index = CPU (swap) block id
  friend bool operator==(const KvPoolSnapshot&, const KvPoolSnapshot&) = default;
};

// The blocks that differ between two snapshots of pools of the same sizes, ascending by id,
// with their new views. Applying it to `before` gives `after`.
struct KvSnapshotDelta {
  std::vector<std::pair<BlockId, KvBlockView>> device;
  std::vector<std::pair<BlockId, KvBlockView>> cpu;
  bool empty() const { return device.empty() && cpu.empty(); }
};

// nullopt-like: `resized` is set (and the lists are empty) when the pools' sizes or block size
// differ, so the observer needs a full snapshot instead. O(blocks + owners).
struct KvSnapshotDiff {
  bool resized = false;
  KvSnapshotDelta delta;
};
KvSnapshotDiff diff_kv_snapshots(const KvPoolSnapshot& before, const KvPoolSnapshot& after);

// Which request (the scheduler's group id, = the engine's request id) each live sequence
// belongs to, learnt from the memory-op stream: an allocate op names its group, a fork's child
// inherits its parent's, a free forgets. Lives with the allocator's owner.
class KvSeqRequests {
 public:
  void observe(const KvMemoryOp& op);
  void clear() { requests_.clear(); }
  // 0 when unknown (an allocate op without a group, e.g. from a test).
  uint64_t request_of(SeqId seq) const;
  size_t size() const { return requests_.size(); }

 private:
  std::unordered_map<SeqId, uint64_t> requests_;
};

// What the prefix-cache actor publishes for observers: one snapshot, numbered, with the request
// of every sequence that holds a block in it. Immutable once published (shared_ptr<const>).
struct KvMapSnapshot {
  uint64_t version = 0;  // increases with each published snapshot
  KvPoolSnapshot pool;
  std::vector<std::pair<SeqId, uint64_t>> seq_requests;  // ascending by sequence
};

// The map published for `pool`: every sequence named as an owner, with its request.
KvMapSnapshot make_kv_map_snapshot(uint64_t version, KvPoolSnapshot pool,
                                   const KvSeqRequests& requests);

}  // namespace pagedserve::cache
