// PagedKvMirror: reference counting over mirrored tables, and the planning arithmetic of
// PagedKvAllocator over them.
#include "cache/paged_kv_mirror.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pagedserve::cache {
namespace {

int blocks_for(int64_t num_tokens, int block_size) {
  return static_cast<int>((num_tokens + block_size - 1) / block_size);
}

}  // namespace

PagedKvMirror::PagedKvMirror(const BlockManagerConfig& config)
    : block_size_(config.block_size),
      // As BlockManager computes it, so plans match the allocator's admission rule.
      watermark_blocks_(static_cast<int>(config.watermark * config.num_device_blocks)),
      sliding_window_(config.sliding_window),
      num_device_blocks_(config.num_device_blocks),
      num_free_device_(config.num_device_blocks),
      num_free_cpu_(config.num_cpu_blocks) {
  if (block_size_ < 1) throw std::invalid_argument("PagedKvMirror: block_size must be >= 1");
}

PagedKvMirror::Seq& PagedKvMirror::known(SeqId seq, const char* op) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    throw std::logic_error(std::string("PagedKvMirror::") + op + ": unknown sequence " +
                           std::to_string(seq));
  }
  return it->second;
}

const PagedKvMirror::Seq& PagedKvMirror::known(SeqId seq, const char* op) const {
  return const_cast<PagedKvMirror*>(this)->known(seq, op);
}

void PagedKvMirror::hold(const Seq& s) {
  auto& refs = s.swapped ? cpu_refs_ : device_refs_;
  for (BlockId id : s.blocks) {
    if (id != kNoBlock) ++refs[id];
  }
}

// A block no table holds any more is free again (a hashed one becomes cached-free, which the
// real pool counts as free too).
void PagedKvMirror::release(const Seq& s) {
  auto& refs = s.swapped ? cpu_refs_ : device_refs_;
  int& num_free = s.swapped ? num_free_cpu_ : num_free_device_;
  for (BlockId id : s.blocks) {
    auto it = refs.find(id);
    if (it == refs.end()) continue;
    if (--it->second == 0) {
      refs.erase(it);
      ++num_free;
    }
  }
}

void PagedKvMirror::reconcile(const KvMemoryResult& result) {
  for (const KvSeqState& state : result.seqs) {
    auto it = seqs_.find(state.seq);
    if (it != seqs_.end()) {
      // Not release(): the snapshot below already counts what the real pool has free.
      auto& refs = it->second.swapped ? cpu_refs_ : device_refs_;
      for (BlockId id : it->second.blocks) {
        if (auto r = refs.find(id); r != refs.end() && --r->second == 0) refs.erase(r);
      }
    }
    Seq& s = seqs_[state.seq];
    s.blocks = state.blocks;
    s.num_tokens = state.num_tokens;
    s.swapped = state.swapped;
    hold(s);
  }
  num_free_device_ = result.snapshot.num_free_device_blocks;
  num_free_cpu_ = result.snapshot.num_free_cpu_blocks;
  prefix_hits_tokens_ = result.snapshot.prefix_cache_hits_tokens;
  cpu_twin_.clear();
  device_twin_.clear();
}

AllocStatus PagedKvMirror::check_admission(std::span<const int32_t> tokens,
                                           const SeqReservation&) const {
  const int total = blocks_for(static_cast<int64_t>(tokens.size()), block_size_);
  if (total > num_device_blocks_ - watermark_blocks_) return AllocStatus::kNever;
  return num_free_device_ - total >= watermark_blocks_ ? AllocStatus::kOk : AllocStatus::kLater;
}

bool PagedKvMirror::last_block_shared(const Seq& s) const {
  if (s.num_tokens % block_size_ == 0 || s.blocks.empty()) return false;
  auto it = device_refs_.find(s.blocks.back());
  return it != device_refs_.end() && it->second > 1;
}

// The same arithmetic as PagedKvAllocator::max_end_tokens / blocks_to_hold.
int PagedKvMirror::max_end_tokens(SeqId seq, bool held, int max_blocks,
                                  const SeqReservation&) const {
  if (!held) return max_blocks * block_size_;
  const Seq& s = known(seq, "max_end_tokens");
  const int cow = last_block_shared(s) ? 1 : 0;
  return max_blocks < cow
             ? 0
             : (blocks_for(s.num_tokens, block_size_) + max_blocks - cow) * block_size_;
}

int PagedKvMirror::blocks_to_hold(SeqId seq, bool held, int end, const SeqReservation&) const {
  if (!held) return blocks_for(end, block_size_);
  const Seq& s = known(seq, "blocks_to_hold");
  const int cow = last_block_shared(s) ? 1 : 0;
  return cow + blocks_for(end, block_size_) - blocks_for(s.num_tokens, block_size_);
}

BlockId PagedKvMirror::new_device_block() {
  --num_free_device_;
  return next_placeholder_--;
}

BlockId PagedKvMirror::new_cpu_block() {
  --num_free_cpu_;
  return next_placeholder_--;
}

AllocationResult PagedKvMirror::allocate(SeqId seq, std::span<const int32_t> tokens) {
  if (has_sequence(seq)) {
    throw std::logic_error("PagedKvMirror::allocate: sequence " + std::to_string(seq) +
                           " already has blocks");
  }
  Seq s;
  s.num_tokens = static_cast<int>(tokens.size());
  for (int i = 0; i < blocks_for(s.num_tokens, block_size_); ++i) {
    s.blocks.push_back(new_device_block());
  }
  hold(s);
  seqs_.emplace(seq, std::move(s));
  return {};
}

std::vector<BlockCopy> PagedKvMirror::append_slot(SeqId seq, bool pending) {
  Seq& s = known(seq, "append_token");
  if (s.swapped) {
    throw std::logic_error("PagedKvMirror::append_token: sequence " + std::to_string(seq) +
                           " is swapped out");
  }
  if (s.num_tokens % block_size_ == 0) {
    const BlockId id = new_device_block();
    s.blocks.push_back(id);
    ++device_refs_[id];
  } else if (last_block_shared(s)) {
    --device_refs_[s.blocks.back()];  // still held by the other sharers
    s.blocks.back() = new_device_block();
    ++device_refs_[s.blocks.back()];
  }
  ++s.num_tokens;
  s.pending = pending;
  return {};
}

std::vector<BlockCopy> PagedKvMirror::append_token(SeqId seq, int32_t) {
  return append_slot(seq, false);
}

std::vector<BlockCopy> PagedKvMirror::append_pending_token(SeqId seq) {
  return append_slot(seq, true);
}

std::vector<BlockCopy> PagedKvMirror::append_speculative_token(SeqId seq, int32_t) {
  append_slot(seq, false);
  ++known(seq, "append_speculative_token").num_speculative;
  return {};
}

int PagedKvMirror::settle_speculative_tokens(SeqId seq, int num_accepted, std::span<const int32_t>,
                                             int num_later) {
  Seq& s = known(seq, "settle_speculative_tokens");
  const int num_own = s.num_speculative - num_later;
  if (num_later < 0 || num_own < 0 || num_accepted < 0 || num_accepted > num_own) {
    throw std::logic_error("PagedKvMirror::settle_speculative_tokens: sequence " +
                           std::to_string(seq) + " has " + std::to_string(s.num_speculative) +
                           " speculative tokens, " + std::to_string(num_later) +
                           " of a later step, " + std::to_string(num_accepted) + " accepted");
  }
  s.num_tokens -= num_own - num_accepted;
  s.num_speculative = num_later;
  int returned = 0;
  while (static_cast<int>(s.blocks.size()) > blocks_for(s.num_tokens, block_size_)) {
    auto it = device_refs_.find(s.blocks.back());
    if (it != device_refs_.end() && --it->second == 0) {
      device_refs_.erase(it);
      ++num_free_device_;
      ++returned;
    }
    s.blocks.pop_back();
  }
  return returned;
}

void PagedKvMirror::resolve_pending_token(SeqId seq, int32_t) {
  known(seq, "resolve_pending_token").pending = false;
}

bool PagedKvMirror::has_pending_token(SeqId seq) const {
  return known(seq, "has_pending_token").pending;
}

// BlockManager::release_blocks_before_window's arithmetic: entries wholly before the window of
// the query at num_tokens, never the last one.
int PagedKvMirror::release_blocks_before_window(SeqId seq) {
  Seq& s = known(seq, "release_blocks_before_window");
  if (s.swapped) {
    throw std::logic_error("PagedKvMirror::release_blocks_before_window: sequence " +
                           std::to_string(seq) + " is swapped out");
  }
  const int first_visible = s.num_tokens - sliding_window_ + 1;
  if (sliding_window_ == 0 || first_visible <= 0) return 0;
  const int end = std::min(first_visible / block_size_, static_cast<int>(s.blocks.size()) - 1);
  int released = 0;
  for (int b = 0; b < end; ++b) {
    BlockId& id = s.blocks[b];
    if (id == kNoBlock) continue;
    auto it = device_refs_.find(id);
    if (it != device_refs_.end() && --it->second == 0) {
      device_refs_.erase(it);
      ++num_free_device_;
    }
    id = kNoBlock;
    ++released;
  }
  return released;
}

std::vector<BlockCopy> PagedKvMirror::fork(SeqId parent, SeqId child) {
  if (has_sequence(child)) {
    throw std::logic_error("PagedKvMirror::fork: child " + std::to_string(child) +
                           " already exists");
  }
  Seq copy = known(parent, "fork");
  hold(copy);
  seqs_.emplace(child, std::move(copy));
  return {};
}

void PagedKvMirror::free(SeqId seq) {
  release(known(seq, "free"));
  seqs_.erase(seq);
}

std::vector<BlockCopy> PagedKvMirror::swap_out(SeqId seq) {
  Seq& s = known(seq, "swap_out");
  std::vector<BlockId> cpu_blocks;
  for (BlockId d : s.blocks) {
    if (d == kNoBlock) {  // released by the window: stays released
      cpu_blocks.push_back(kNoBlock);
      continue;
    }
    auto twin = cpu_twin_.find(d);
    const BlockId c = twin != cpu_twin_.end() ? twin->second : new_cpu_block();
    cpu_twin_[d] = c;
    cpu_blocks.push_back(c);
  }
  release(s);
  s.blocks = std::move(cpu_blocks);
  s.swapped = true;
  hold(s);
  return {};
}

std::vector<BlockCopy> PagedKvMirror::swap_in(SeqId seq) {
  Seq& s = known(seq, "swap_in");
  std::vector<BlockId> device_blocks;
  for (BlockId c : s.blocks) {
    if (c == kNoBlock) {
      device_blocks.push_back(kNoBlock);
      continue;
    }
    auto twin = device_twin_.find(c);
    const BlockId d = twin != device_twin_.end() ? twin->second : new_device_block();
    device_twin_[c] = d;
    device_blocks.push_back(d);
  }
  release(s);
  s.blocks = std::move(device_blocks);
  s.swapped = false;
  hold(s);
  return {};
}

std::span<const BlockId> PagedKvMirror::block_table(SeqId seq) const {
  const Seq& s = known(seq, "block_table");
  if (s.swapped) {
    throw std::logic_error("PagedKvMirror::block_table: sequence " + std::to_string(seq) +
                           " is swapped out");
  }
  return s.blocks;
}

std::span<const BlockId> PagedKvMirror::cpu_block_table(SeqId seq) const {
  const Seq& s = known(seq, "cpu_block_table");
  if (!s.swapped) {
    throw std::logic_error("PagedKvMirror::cpu_block_table: sequence " + std::to_string(seq) +
                           " is not swapped out");
  }
  return s.blocks;
}

int PagedKvMirror::num_tokens(SeqId seq) const { return known(seq, "num_tokens").num_tokens; }

}  // namespace pagedserve::cache
