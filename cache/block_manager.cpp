// BlockManager: sequences' block tables over the device and CPU pools (see block_manager.h).
#include "cache/block_manager.h"

#include <algorithm>
#include <cassert>
#include <stdexcept>

namespace pagedserve::cache {

namespace {

std::string seq_name(SeqId seq) { return "sequence " + std::to_string(seq); }

}  // namespace

BlockManager::BlockManager(const BlockManagerConfig& config)
    : block_size_(config.block_size),
      watermark_blocks_(static_cast<int>(config.watermark * config.num_device_blocks)),
      enable_prefix_caching_(config.enable_prefix_caching),
      sliding_window_(config.sliding_window),
      device_(config.num_device_blocks, config.enable_prefix_caching),
      cpu_(config.num_cpu_blocks, /*enable_caching=*/false),
      cpu_twin_of_device_(static_cast<size_t>(device_.num_blocks()), kNoBlock),
      device_twin_of_cpu_(static_cast<size_t>(cpu_.num_blocks()), kNoBlock) {
  if (config.block_size < 1) throw std::invalid_argument("BlockManager: block_size must be >= 1");
  if (config.num_device_blocks < 0 || config.num_cpu_blocks < 0) {
    throw std::invalid_argument("BlockManager: block counts must be >= 0");
  }
  if (!(config.watermark >= 0.0 && config.watermark < 1.0)) {
    throw std::invalid_argument("BlockManager: watermark must be in [0, 1)");
  }
  if (config.sliding_window < 0) {
    throw std::invalid_argument("BlockManager: sliding_window must be >= 0");
  }
}

// ---- helpers ----

int BlockManager::num_blocks_for(int64_t num_tokens) const {
  return static_cast<int>((num_tokens + block_size_ - 1) / block_size_);
}

const std::vector<BlockHash>& BlockManager::prompt_hashes(std::span<const int32_t> tokens,
                                                          std::string_view cache_salt) const {
  static const std::vector<BlockHash> kNone;
  if (!enable_prefix_caching_) return kNone;
  const size_t full = tokens.size() / block_size_ * block_size_;
  const std::span<const int32_t> full_tokens = tokens.first(full);
  if (memo_.cache_salt == cache_salt && std::equal(full_tokens.begin(), full_tokens.end(),
                                                   memo_.tokens.begin(), memo_.tokens.end())) {
    return memo_.hashes;
  }
  memo_.hashes = hash_full_blocks(full_tokens, block_size_, cache_salt);
  memo_.tokens.assign(full_tokens.begin(), full_tokens.end());
  memo_.cache_salt.assign(cache_salt);
  return memo_.hashes;
}

std::vector<BlockId> BlockManager::find_cached_prefix(std::span<const int32_t> tokens,
                                                      std::string_view cache_salt) const {
  std::vector<BlockId> hits;
  if (!enable_prefix_caching_ || tokens.empty()) return hits;
  const std::vector<BlockHash>& hashes = prompt_hashes(tokens, cache_salt);
  // At least the last token is recomputed: its logits are what the step samples from.
  const size_t max_hits = std::min(hashes.size(), (tokens.size() - 1) / block_size_);
  for (size_t i = 0; i < max_hits; ++i) {
    const std::optional<BlockId> hit = device_.lookup(hashes[i]);
    if (!hit) break;
    hits.push_back(*hit);
  }
  return hits;
}

int BlockManager::num_blocks_to_take(int64_t num_tokens, std::span<const BlockId> hits) const {
  int take = num_blocks_for(num_tokens) - static_cast<int>(hits.size());
  for (BlockId id : hits) {
    if (device_.block(id).ref_count == 0) ++take;  // a cached-free hit leaves the free queue
  }
  return take;
}

const BlockManager::Sequence& BlockManager::sequence(SeqId seq, const char* op) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    throw std::logic_error(std::string("BlockManager::") + op + ": unknown " + seq_name(seq));
  }
  return it->second;
}

BlockManager::Sequence& BlockManager::device_sequence(SeqId seq, const char* op) {
  Sequence& s = const_cast<Sequence&>(sequence(seq, op));
  if (s.swapped) {
    throw std::logic_error(std::string("BlockManager::") + op + ": " + seq_name(seq) +
                           " is swapped out");
  }
  return s;
}

void BlockManager::release_device(BlockId id) {
  if (device_.release(id)) unlink_twin_of_device(id);
}

void BlockManager::release_cpu(BlockId id) {
  if (!cpu_.release(id)) return;
  const BlockId d = device_twin_of_cpu_[id];
  if (d != kNoBlock) {
    cpu_twin_of_device_[d] = kNoBlock;
    device_twin_of_cpu_[id] = kNoBlock;
  }
}

void BlockManager::unlink_twin_of_device(BlockId id) {
  const BlockId c = cpu_twin_of_device_[id];
  if (c != kNoBlock) {
    device_twin_of_cpu_[c] = kNoBlock;
    cpu_twin_of_device_[id] = kNoBlock;
  }
}

void BlockManager::link_twins(BlockId device_block, BlockId cpu_block) {
  assert(cpu_twin_of_device_[device_block] == kNoBlock);
  assert(device_twin_of_cpu_[cpu_block] == kNoBlock);
  cpu_twin_of_device_[device_block] = cpu_block;
  device_twin_of_cpu_[cpu_block] = device_block;
}

int BlockManager::num_cpu_blocks_to_take(const Sequence& s) const {
  int take = 0;
  for (BlockId d : s.blocks) {
    take += d != kNoBlock && cpu_twin_of_device_[d] == kNoBlock ? 1 : 0;
  }
  return take;
}

int BlockManager::num_device_blocks_to_take(const Sequence& s) const {
  int take = 0;
  for (size_t i = s.num_released; i < s.blocks.size(); ++i) {
    if (device_twin_of_cpu_[s.blocks[i]] != kNoBlock) continue;
    if (i < s.block_hashes.size()) {
      if (const std::optional<BlockId> hit = device_.lookup(s.block_hashes[i])) {
        take += device_.block(*hit).ref_count == 0 ? 1 : 0;
        continue;
      }
    }
    ++take;
  }
  return take;
}

// ---- admission ----

AllocStatus BlockManager::check_allocate(std::span<const int32_t> prompt_tokens,
                                         std::string_view cache_salt) const {
  const int total = num_blocks_for(static_cast<int64_t>(prompt_tokens.size()));
  if (total > device_.num_blocks() - watermark_blocks_) return AllocStatus::kNever;
  const std::vector<BlockId> hits = find_cached_prefix(prompt_tokens, cache_salt);
  const int take = num_blocks_to_take(static_cast<int64_t>(prompt_tokens.size()), hits);
  return device_.num_free_blocks() - take >= watermark_blocks_ ? AllocStatus::kOk
                                                               : AllocStatus::kLater;
}

bool BlockManager::can_allocate(std::span<const int32_t> prompt_tokens,
                                std::string_view cache_salt) const {
  return check_allocate(prompt_tokens, cache_salt) == AllocStatus::kOk;
}

int BlockManager::cached_prefix_tokens(std::span<const int32_t> prompt_tokens,
                                       std::string_view cache_salt) const {
  return static_cast<int>(find_cached_prefix(prompt_tokens, cache_salt).size()) * block_size_;
}

bool BlockManager::can_append_slots(int num_running_seqs) const {
  return device_.num_free_blocks() >= num_running_seqs;
}

bool BlockManager::can_swap_out(SeqId seq) const {
  const Sequence& s = sequence(seq, "can_swap_out");
  return !s.swapped && num_cpu_blocks_to_take(s) <= cpu_.num_free_blocks();
}

bool BlockManager::can_swap_in(SeqId seq) const {
  const Sequence& s = sequence(seq, "can_swap_in");
  return s.swapped && device_.num_free_blocks() - num_device_blocks_to_take(s) >= watermark_blocks_;
}

// ---- sequence lifetime ----

AllocationResult BlockManager::allocate(SeqId seq, std::span<const int32_t> prompt_tokens,
                                        std::string_view cache_salt) {
  if (seqs_.count(seq) != 0) {
    throw std::logic_error("BlockManager::allocate: " + seq_name(seq) + " already has blocks");
  }
  if (prompt_tokens.empty()) {
    throw std::logic_error("BlockManager::allocate: empty prompt for " + seq_name(seq));
  }
  const int64_t n = static_cast<int64_t>(prompt_tokens.size());
  const int num_blocks = num_blocks_for(n);
  const std::vector<BlockId> hits = find_cached_prefix(prompt_tokens, cache_salt);
  const int take = num_blocks_to_take(n, hits);
  if (take > device_.num_free_blocks()) {
    throw std::runtime_error("BlockManager::allocate: " + seq_name(seq) + " needs " +
                             std::to_string(take) + " free blocks, " +
                             std::to_string(device_.num_free_blocks()) + " are free");
  }

  Sequence s;
  s.num_tokens = static_cast<int>(n);
  s.blocks.reserve(num_blocks);
  // Hits first, so that allocating the rest cannot evict them.
  for (BlockId id : hits) {
    device_.acquire(id);
    s.blocks.push_back(id);
  }
  const std::vector<BlockHash>& hashes = prompt_hashes(prompt_tokens, cache_salt);
  for (int i = static_cast<int>(hits.size()); i < num_blocks; ++i) {
    const int fill = static_cast<int>(std::min<int64_t>(block_size_, n - int64_t{i} * block_size_));
    s.blocks.push_back(device_.allocate(fill));
    if (i < static_cast<int>(hashes.size())) publish_block(s.blocks, hashes, prompt_tokens, i);
  }
  if (enable_prefix_caching_) {
    s.block_hashes = hashes;
    if (events_ != nullptr) {
      s.full_tokens.assign(prompt_tokens.begin(),
                           prompt_tokens.begin() + hashes.size() * block_size_);
    }
    s.tail_tokens.assign(prompt_tokens.begin() + hashes.size() * block_size_, prompt_tokens.end());
    s.cache_salt.assign(cache_salt);
    prefix_queries_tokens_ += n;
    prefix_hits_tokens_ += static_cast<int64_t>(hits.size()) * block_size_;
  }
  seqs_.emplace(seq, std::move(s));
  return AllocationResult{static_cast<int>(hits.size()) * block_size_};
}

std::vector<BlockCopy> BlockManager::append_token(SeqId seq, int32_t token) {
  return append_slot(seq, token, SlotKind::kKnown, "append_token");
}

std::vector<BlockCopy> BlockManager::append_pending_token(SeqId seq) {
  // The placeholder never reaches a hash: hash_full_tail runs only once it is replaced.
  return append_slot(seq, /*token=*/-1, SlotKind::kPending, "append_pending_token");
}

std::vector<BlockCopy> BlockManager::append_speculative_token(SeqId seq, int32_t token) {
  return append_slot(seq, token, SlotKind::kSpeculative, "append_speculative_token");
}

std::vector<BlockCopy> BlockManager::append_slot(SeqId seq, int32_t token, SlotKind kind,
                                                 const char* op) {
  Sequence& s = device_sequence(seq, op);
  if (s.pending) {
    throw std::logic_error(std::string("BlockManager::") + op + ": " + seq_name(seq) +
                           " still has a pending token");
  }
  if (s.num_speculative > 0 && kind != SlotKind::kSpeculative) {
    throw std::logic_error(std::string("BlockManager::") + op + ": " + seq_name(seq) +
                           " has speculative tokens not settled yet");
  }
  const bool pending = kind == SlotKind::kPending;
  std::vector<BlockCopy> copies;
  const int offset = s.num_tokens % block_size_;  // slot of the new token in its block
  if (offset == 0 || device_.block(s.blocks.back()).ref_count > 1) {
    if (device_.num_free_blocks() == 0) {
      throw std::runtime_error(std::string("BlockManager::") + op + ": no free block for " +
                               seq_name(seq));
    }
  }
  if (offset == 0) {
    s.blocks.push_back(device_.allocate(1));
  } else if (BlockId& last = s.blocks.back(); device_.block(last).ref_count > 1) {
    // Copy-on-write: the shared partial block keeps the other holders' view.
    const BlockId copy = device_.allocate(offset + 1);
    copies.push_back(BlockCopy{last, copy});
    device_.release(last);
    last = copy;
  } else {
    unlink_twin_of_device(last);  // the CPU twin no longer matches once this slot is written
    device_.set_num_tokens(last, offset + 1);
  }
  ++s.num_tokens;
  s.pending = pending;
  if (kind == SlotKind::kSpeculative) ++s.num_speculative;

  if (enable_prefix_caching_) {
    s.tail_tokens.push_back(token);
    if (kind == SlotKind::kKnown && static_cast<int>(s.tail_tokens.size()) == block_size_) {
      hash_full_tail(s);
    }
  }
  return copies;
}

void BlockManager::hash_settled_blocks(Sequence& s) {
  // Only accepted tokens reach a hash: the tail's front blocks, while they are whole.
  while (static_cast<int>(s.tail_tokens.size()) - s.num_speculative - (s.pending ? 1 : 0) >=
         block_size_) {
    hash_full_tail(s);
  }
}

int BlockManager::settle_speculative_tokens(SeqId seq, int num_accepted,
                                            std::span<const int32_t> accepted_tokens,
                                            int num_later) {
  Sequence& s = device_sequence(seq, "settle_speculative_tokens");
  const int num_own = s.num_speculative - num_later;  // this step's speculative slots
  if (num_later < 0 || num_own < 0 || num_accepted < 0 || num_accepted > num_own) {
    throw std::logic_error("BlockManager::settle_speculative_tokens: " + seq_name(seq) + " has " +
                           std::to_string(s.num_speculative) + " speculative tokens, " +
                           std::to_string(num_later) + " of a later step, " +
                           std::to_string(num_accepted) + " accepted");
  }
  if (!accepted_tokens.empty() && static_cast<int>(accepted_tokens.size()) != num_accepted) {
    throw std::logic_error("BlockManager::settle_speculative_tokens: " + seq_name(seq) + " got " +
                           std::to_string(accepted_tokens.size()) + " token ids for " +
                           std::to_string(num_accepted) + " accepted tokens");
  }
  const int num_rejected = num_own - num_accepted;
  if (enable_prefix_caching_) {
    const auto own = s.tail_tokens.end() - s.num_speculative;
    // The proposals' slots were recorded with placeholders: the hash needs the real ids.
    if (!accepted_tokens.empty()) std::copy(accepted_tokens.begin(), accepted_tokens.end(), own);
    // The rejected slots go; a later step's slots move down over them.
    s.tail_tokens.erase(own + num_accepted, own + num_own);
  }
  s.num_tokens -= num_rejected;
  s.num_speculative = num_later;
  // Back to front, like free(): blocks that held only rejected tokens (never hashed) go back.
  const int keep = num_blocks_for(s.num_tokens);
  int returned = 0;
  while (static_cast<int>(s.blocks.size()) > keep) {
    release_device(s.blocks.back());
    s.blocks.pop_back();
    ++returned;
  }
  if (num_rejected > 0) {
    const BlockId last = s.blocks.back();
    unlink_twin_of_device(last);
    device_.set_num_tokens(last, s.num_tokens - (keep - 1) * block_size_);
  }
  if (enable_prefix_caching_) hash_settled_blocks(s);
  return returned;
}

int BlockManager::num_speculative_tokens(SeqId seq) const {
  return sequence(seq, "num_speculative_tokens").num_speculative;
}

void BlockManager::hash_full_tail(Sequence& s) {
  // The tail's first block_size tokens fill the next block of the table: hash and publish it.
  const std::span<const int32_t> block(s.tail_tokens.data(), static_cast<size_t>(block_size_));
  const bool first = s.block_hashes.empty();
  const BlockHash hash = hash_block(first ? kRootBlockHash : s.block_hashes.back(), block,
                                    first ? std::string_view(s.cache_salt) : std::string_view{});
  s.block_hashes.push_back(hash);
  if (events_ != nullptr) s.full_tokens.insert(s.full_tokens.end(), block.begin(), block.end());
  publish_block(s.blocks, s.block_hashes, s.full_tokens, s.block_hashes.size() - 1);
  s.tail_tokens.erase(s.tail_tokens.begin(), s.tail_tokens.begin() + block_size_);
}

void BlockManager::publish_block(std::span<const BlockId> table, std::span<const BlockHash> hashes,
                                 std::span<const int32_t> tokens, size_t i) {
  // An ancestor's entry can be missing while this table holds its content: this table's copy
  // was a duplicate (another block held the hash) and that block was evicted since, or it was
  // evicted while this sequence was swapped out. Re-entering it keeps the index a set of
  // chains, so a router learning a block always knows its parent. Released entries (sliding
  // window) hold no content: the walk stops there.
  size_t first = i;
  while (first > 0 && table[first - 1] != kNoBlock && !device_.lookup(hashes[first - 1])) --first;
  for (size_t j = first; j <= i; ++j) {
    if (!device_.cache(table[j], hashes[j]) || events_ == nullptr) continue;
    events_->block_stored(hashes[j], j == 0 ? std::nullopt : std::optional(hashes[j - 1]),
                          tokens.subspan(j * block_size_, block_size_));
  }
}

void BlockManager::set_event_recorder(KvEventRecorder* recorder) {
  if (!seqs_.empty() || device_.num_hashed_blocks() != 0) {
    throw std::logic_error(
        "BlockManager::set_event_recorder: attach the recorder before the first allocate");
  }
  events_ = recorder;
  device_.set_event_recorder(recorder);
}

void BlockManager::resolve_pending_token(SeqId seq, int32_t token) {
  Sequence& s = device_sequence(seq, "resolve_pending_token");
  if (!s.pending) {
    throw std::logic_error("BlockManager::resolve_pending_token: " + seq_name(seq) +
                           " has no pending token");
  }
  s.pending = false;
  if (!enable_prefix_caching_) return;
  // Nothing was appended after the pending token, so it is the tail's last, in the last block.
  s.tail_tokens.back() = token;
  if (static_cast<int>(s.tail_tokens.size()) == block_size_) hash_full_tail(s);
}

bool BlockManager::has_pending_token(SeqId seq) const {
  return sequence(seq, "has_pending_token").pending;
}

int BlockManager::release_blocks_before_window(SeqId seq) {
  Sequence& s = device_sequence(seq, "release_blocks_before_window");
  if (sliding_window_ == 0) return 0;
  // The query at position num_tokens reads from first_visible on; every block ending before
  // it is dead. The last block always stays: it takes the next slot (or holds a pending one).
  const int first_visible = s.num_tokens - sliding_window_ + 1;
  if (first_visible <= 0) return 0;
  const int end = std::min(first_visible / block_size_, static_cast<int>(s.blocks.size()) - 1);
  const int begin = s.num_released;
  // Back to front, like free(): among these, the earliest prefix is evicted last.
  for (int b = end - 1; b >= begin; --b) {
    release_device(s.blocks[b]);
    s.blocks[b] = kNoBlock;
  }
  s.num_released = std::max(begin, end);
  return std::max(0, end - begin);
}

void BlockManager::fork(SeqId parent, SeqId child) {
  if (seqs_.count(child) != 0) {
    throw std::logic_error("BlockManager::fork: child " + seq_name(child) + " already exists");
  }
  Sequence copy = device_sequence(parent, "fork");
  if (copy.pending || copy.num_speculative > 0) {
    throw std::logic_error("BlockManager::fork: " + seq_name(parent) +
                           " has a pending or speculative token");
  }
  for (size_t i = copy.num_released; i < copy.blocks.size(); ++i) device_.acquire(copy.blocks[i]);
  seqs_.emplace(child, std::move(copy));
}

void BlockManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw std::logic_error("BlockManager::free: unknown " + seq_name(seq));
  const Sequence& s = it->second;
  // Tail first: the free queue then evicts this sequence's longest prefix before its parents.
  for (auto b = s.blocks.rbegin(); b != s.blocks.rend() - s.num_released; ++b) {
    if (s.swapped) {
      release_cpu(*b);
    } else {
      release_device(*b);
    }
  }
  seqs_.erase(it);
}

std::vector<BlockCopy> BlockManager::swap_out(SeqId seq) {
  Sequence& s = device_sequence(seq, "swap_out");
  if (s.pending || s.num_speculative > 0) {
    throw std::logic_error("BlockManager::swap_out: " + seq_name(seq) +
                           " has a pending or speculative token");
  }
  const int take = num_cpu_blocks_to_take(s);
  if (take > cpu_.num_free_blocks()) {
    throw std::runtime_error("BlockManager::swap_out: " + seq_name(seq) + " needs " +
                             std::to_string(take) + " CPU blocks, " +
                             std::to_string(cpu_.num_free_blocks()) + " are free");
  }
  std::vector<BlockCopy> copies;
  // Released entries stay released: only the live blocks cross the bus.
  std::vector<BlockId> cpu_blocks(static_cast<size_t>(s.num_released), kNoBlock);
  cpu_blocks.reserve(s.blocks.size());
  for (size_t i = s.num_released; i < s.blocks.size(); ++i) {
    const BlockId d = s.blocks[i];
    BlockId c = cpu_twin_of_device_[d];
    if (c != kNoBlock) {
      cpu_.acquire(c);  // a sharer already copied this block out
    } else {
      c = cpu_.allocate(device_.block(d).num_tokens);
      copies.push_back(BlockCopy{d, c});
      link_twins(d, c);
    }
    cpu_blocks.push_back(c);
  }
  for (auto d = s.blocks.rbegin(); d != s.blocks.rend() - s.num_released; ++d) {
    release_device(*d);
  }
  s.blocks = std::move(cpu_blocks);
  s.swapped = true;
  return copies;
}

std::vector<BlockCopy> BlockManager::swap_in(SeqId seq) {
  Sequence& s = const_cast<Sequence&>(sequence(seq, "swap_in"));
  if (!s.swapped) {
    throw std::logic_error("BlockManager::swap_in: " + seq_name(seq) + " is not swapped out");
  }
  const int take = num_device_blocks_to_take(s);
  if (take > device_.num_free_blocks()) {
    throw std::runtime_error("BlockManager::swap_in: " + seq_name(seq) + " needs " +
                             std::to_string(take) + " device blocks, " +
                             std::to_string(device_.num_free_blocks()) + " are free");
  }
  std::vector<BlockId> device_blocks(s.blocks.size(), kNoBlock);
  // Pass 1: blocks whose content is still on the device (a twin, or a prefix-cache entry).
  // Taking them before allocating keeps the allocations from evicting them.
  for (size_t i = s.num_released; i < s.blocks.size(); ++i) {
    BlockId d = device_twin_of_cpu_[s.blocks[i]];
    if (d == kNoBlock && i < s.block_hashes.size()) {
      d = device_.lookup(s.block_hashes[i]).value_or(kNoBlock);
    }
    if (d != kNoBlock) {
      device_.acquire(d);
      device_blocks[i] = d;
    }
  }
  // Pass 2: copy the rest in, re-publishing full blocks in the prefix cache.
  std::vector<BlockCopy> copies;
  for (size_t i = s.num_released; i < s.blocks.size(); ++i) {
    if (device_blocks[i] != kNoBlock) continue;
    const BlockId c = s.blocks[i];
    const BlockId d = device_.allocate(cpu_.block(c).num_tokens);
    copies.push_back(BlockCopy{c, d});
    link_twins(d, c);
    device_blocks[i] = d;
    if (i < s.block_hashes.size()) publish_block(device_blocks, s.block_hashes, s.full_tokens, i);
  }
  for (auto c = s.blocks.rbegin(); c != s.blocks.rend() - s.num_released; ++c) release_cpu(*c);
  s.blocks = std::move(device_blocks);
  s.swapped = false;
  return copies;
}

// ---- queries ----

bool BlockManager::is_swapped(SeqId seq) const { return sequence(seq, "is_swapped").swapped; }

std::span<const BlockId> BlockManager::block_table(SeqId seq) const {
  const Sequence& s = sequence(seq, "block_table");
  if (s.swapped) {
    throw std::logic_error("BlockManager::block_table: " + seq_name(seq) + " is swapped out");
  }
  return s.blocks;
}

std::span<const BlockId> BlockManager::cpu_block_table(SeqId seq) const {
  const Sequence& s = sequence(seq, "cpu_block_table");
  if (!s.swapped) {
    throw std::logic_error("BlockManager::cpu_block_table: " + seq_name(seq) +
                           " is not swapped out");
  }
  return s.blocks;
}

int BlockManager::num_tokens(SeqId seq) const { return sequence(seq, "num_tokens").num_tokens; }

double BlockManager::usage() const {
  const int total = device_.num_blocks();
  return total == 0 ? 0.0 : static_cast<double>(device_.num_used_blocks()) / total;
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats st;
  st.num_total_device_blocks = device_.num_blocks();
  st.num_used_device_blocks = device_.num_used_blocks();
  st.num_free_device_blocks = device_.num_free_blocks();
  st.num_cached_blocks = device_.num_cached_free_blocks();
  st.num_hashed_blocks = device_.num_hashed_blocks();
  st.num_total_cpu_blocks = cpu_.num_blocks();
  st.num_used_cpu_blocks = cpu_.num_used_blocks();
  st.usage = usage();
  st.prefix_cache_queries_tokens = prefix_queries_tokens_;
  st.prefix_cache_hits_tokens = prefix_hits_tokens_;
  st.num_evicted_blocks = device_.num_evictions();
  st.num_stored_tokens = device_.num_stored_tokens();
  st.num_reserved_slots = int64_t{device_.num_used_blocks()} * block_size_;
  st.fragmentation = st.num_reserved_slots == 0
                         ? 0.0
                         : 1.0 - static_cast<double>(st.num_stored_tokens) /
                                     static_cast<double>(st.num_reserved_slots);
  return st;
}

}  // namespace pagedserve::cache
