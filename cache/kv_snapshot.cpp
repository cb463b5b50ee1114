// KV pool snapshots for observers (see kv_snapshot.h), and BlockManager::snapshot(), kept here
// so the block manager's own file stays about allocation.
#include "cache/kv_snapshot.h"

#include <algorithm>

#include "cache/block_manager.h"
#include "cache/kv_memory_ops.h"

namespace pagedserve::cache {

const char* kv_block_state_name(KvBlockState state) {
  switch (state) {
    case KvBlockState::kFree:
      return "free";
    case KvBlockState::kCached:
      return "cached";
    case KvBlockState::kUsed:
      return "used";
  }
  return "free";
}

namespace {

KvBlockView view_of(const Block& block, int block_size) {
  KvBlockView view;
  view.ref_count = block.ref_count;
  view.has_hash = block.has_hash;
  view.hash = block.has_hash ? block.hash.low64 : 0;
  if (block.ref_count > 0) {
    view.state = KvBlockState::kUsed;
    view.num_tokens = block.num_tokens;
  } else if (block.has_hash) {
    view.state = KvBlockState::kCached;
    view.num_tokens = block_size;  // only full blocks are hashed
  }
  return view;
}

void diff_pool(const std::vector<KvBlockView>& before, const std::vector<KvBlockView>& after,
               std::vector<std::pair<BlockId, KvBlockView>>& changed) {
  for (size_t id = 0; id < after.size(); ++id) {
    if (!(before[id] == after[id])) changed.emplace_back(static_cast<BlockId>(id), after[id]);
  }
}

}  // namespace

KvPoolSnapshot BlockManager::snapshot() const {
  KvPoolSnapshot snap;
  snap.block_size = block_size_;
  snap.device.reserve(static_cast<size_t>(device_.num_blocks()));
  for (BlockId id = 0; id < device_.num_blocks(); ++id) {
    snap.device.push_back(view_of(device_.block(id), block_size_));
  }
  snap.cpu.reserve(static_cast<size_t>(cpu_.num_blocks()));
  for (BlockId id = 0; id < cpu_.num_blocks(); ++id) {
    snap.cpu.push_back(view_of(cpu_.block(id), block_size_));
  }
  // Holders from the tables: a swapped sequence's table names CPU blocks.
  for (const auto& [seq, s] : seqs_) {
    std::vector<KvBlockView>& pool = s.swapped ? snap.cpu : snap.device;
    for (size_t i = static_cast<size_t>(s.num_released); i < s.blocks.size(); ++i) {
      pool[static_cast<size_t>(s.blocks[i])].owners.push_back(seq);
    }
  }
  // seqs_ is unordered: sort so equal states give equal snapshots (and small diffs).
  for (std::vector<KvBlockView>* pool : {&snap.device, &snap.cpu}) {
    for (KvBlockView& view : *pool) {
      if (view.owners.size() > 1) std::sort(view.owners.begin(), view.owners.end());
    }
  }
  return snap;
}

KvSnapshotDiff diff_kv_snapshots(const KvPoolSnapshot& before, const KvPoolSnapshot& after) {
  KvSnapshotDiff diff;
  if (before.block_size != after.block_size || before.device.size() != after.device.size() ||
      before.cpu.size() != after.cpu.size()) {
    diff.resized = true;
    return diff;
  }
  diff_pool(before.device, after.device, diff.delta.device);
  diff_pool(before.cpu, after.cpu, diff.delta.cpu);
  return diff;
}

void KvSeqRequests::observe(const KvMemoryOp& op) {
  switch (op.kind) {
    case KvOpKind::kAllocate:
      requests_[op.seq] = op.group;
      break;
    case KvOpKind::kFork:
      requests_[op.child] = request_of(op.seq);
      break;
    case KvOpKind::kFree:
      requests_.erase(op.seq);
      break;
    default:
      break;
  }
}

uint64_t KvSeqRequests::request_of(SeqId seq) const {
  const auto it = requests_.find(seq);
  return it == requests_.end() ? 0 : it->second;
}

KvMapSnapshot make_kv_map_snapshot(uint64_t version, KvPoolSnapshot pool,
                                   const KvSeqRequests& requests) {
  KvMapSnapshot map;
  map.version = version;
  std::vector<SeqId> seqs;
  for (const std::vector<KvBlockView>* blocks : {&pool.device, &pool.cpu}) {
    for (const KvBlockView& view : *blocks)
      seqs.insert(seqs.end(), view.owners.begin(), view.owners.end());
  }
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  map.seq_requests.reserve(seqs.size());
  for (SeqId seq : seqs) map.seq_requests.emplace_back(seq, requests.request_of(seq));
  map.pool = std::move(pool);
  return map;
}

}  // namespace pagedserve::cache
