// FirstFitRegions and ReservingKvAllocator: the contiguous-region baselines.
#include "cache/reserving_kv_allocator.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pagedserve::cache {

// ---- FirstFitRegions ----

FirstFitRegions::FirstFitRegions(int num_blocks) : num_blocks_(num_blocks), num_free_(num_blocks) {
  if (num_blocks < 0) throw std::invalid_argument("FirstFitRegions: negative pool size");
  if (num_blocks > 0) holes_.emplace(0, num_blocks);
}

std::optional<Region> FirstFitRegions::allocate(int num_blocks, int alignment) {
  if (num_blocks <= 0) throw std::logic_error("FirstFitRegions::allocate: empty region");
  if (alignment < 1) throw std::logic_error("FirstFitRegions::allocate: alignment < 1");
  for (auto it = holes_.begin(); it != holes_.end(); ++it) {
    const BlockId hole_start = it->first;
    const int hole_length = it->second;
    const BlockId start = (hole_start + alignment - 1) / alignment * alignment;
    if (start + num_blocks > hole_start + hole_length) continue;
    holes_.erase(it);
    if (start > hole_start) holes_.emplace(hole_start, start - hole_start);
    const int rest = hole_start + hole_length - (start + num_blocks);
    if (rest > 0) holes_.emplace(start + num_blocks, rest);
    num_free_ -= num_blocks;
    return Region{start, num_blocks};
  }
  return std::nullopt;
}

bool FirstFitRegions::fits(int num_blocks, int alignment) const {
  for (const auto& [hole_start, hole_length] : holes_) {
    const BlockId start = (hole_start + alignment - 1) / alignment * alignment;
    if (start + num_blocks <= hole_start + hole_length) return true;
  }
  return false;
}

void FirstFitRegions::free(Region region) {
  const BlockId end = region.start + region.num_blocks;
  if (region.num_blocks <= 0 || region.start < 0 || end > num_blocks_) {
    throw std::logic_error("FirstFitRegions::free: region outside the pool");
  }
  auto next = holes_.lower_bound(region.start);
  if (next != holes_.end() && next->first < end) {
    throw std::logic_error("FirstFitRegions::free: region overlaps a free hole");
  }
  if (next != holes_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > region.start) {
      throw std::logic_error("FirstFitRegions::free: region overlaps a free hole");
    }
  }
  BlockId start = region.start;
  int length = region.num_blocks;
  if (next != holes_.end() && next->first == end) {  // merge with the hole after
    length += next->second;
    next = holes_.erase(next);
  }
  if (next != holes_.begin()) {  // merge with the hole before
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      holes_.erase(prev);
    }
  }
  holes_.emplace(start, length);
  num_free_ += region.num_blocks;
}

int FirstFitRegions::largest_hole() const {
  int largest = 0;
  for (const auto& [start, length] : holes_) largest = std::max(largest, length);
  return largest;
}

std::vector<Region> FirstFitRegions::holes() const {
  std::vector<Region> out;
  for (const auto& [start, length] : holes_) out.push_back({start, length});
  return out;
}

// ---- ReservingKvAllocator ----

ReservingKvAllocator::ReservingKvAllocator(KvAllocatorKind kind, const BlockManagerConfig& config)
    : kind_(kind),
      buddy_(config.buddy_regions),
      block_size_(config.block_size),
      watermark_blocks_(static_cast<int>(config.watermark * config.num_device_blocks)),
      regions_(config.num_device_blocks) {
  if (kind == KvAllocatorKind::kPaged) {
    throw std::invalid_argument("ReservingKvAllocator: paged is not a reserving policy");
  }
  if (config.block_size < 1) throw std::invalid_argument("ReservingKvAllocator: block_size < 1");
  if (!(config.watermark >= 0.0 && config.watermark < 1.0)) {
    throw std::invalid_argument("ReservingKvAllocator: watermark must be in [0, 1)");
  }
}

namespace {

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The output length the region is sized for: the true length when known, else max_tokens.
int64_t expected_output(const SeqReservation& f) {
  return f.output_len_hint > 0 ? f.output_len_hint : f.max_output_len;
}

}  // namespace

int ReservingKvAllocator::region_tokens(const SeqReservation& f) const {
  int64_t tokens = 0;
  switch (kind_) {
    case KvAllocatorKind::kReserveMax:
      tokens = f.max_model_len > 0 ? f.max_model_len : f.prompt_len + f.max_output_len;
      break;
    case KvAllocatorKind::kReservePow2:
      tokens = f.prompt_len + next_pow2(std::max<int64_t>(expected_output(f), 1));
      break;
    default:
      tokens = f.prompt_len + expected_output(f);
      break;
  }
  // Readmitted after outgrowing a region sized by a wrong hint: size for max_tokens now.
  if (tokens <= f.current_len) tokens = f.prompt_len + int64_t{f.max_output_len};
  if (f.max_model_len > 0) tokens = std::min<int64_t>(tokens, f.max_model_len);
  return static_cast<int>(std::max<int64_t>({tokens, f.current_len, 1}));
}

int ReservingKvAllocator::region_blocks(const SeqReservation& future) const {
  const int blocks = blocks_for(region_tokens(future));
  return buddy_ ? static_cast<int>(next_pow2(blocks)) : blocks;
}

AllocStatus ReservingKvAllocator::check_admission(std::span<const int32_t>,
                                                  const SeqReservation& future) const {
  const int blocks = region_blocks(future);
  const int64_t need = int64_t{blocks} * std::max(future.num_regions, 1);
  // An aligned run fits the empty pool whenever it is no longer than the pool (start 0).
  if (need > regions_.num_blocks() - watermark_blocks_) return AllocStatus::kNever;
  return regions_.fits(blocks, alignment(blocks)) ? AllocStatus::kOk : AllocStatus::kLater;
}

// A new sequence: its whole region or nothing. A held one: up to its region's end; asking for
// more (max_blocks unbounded) means it outgrew its region.
int ReservingKvAllocator::max_end_tokens(SeqId seq, bool held, int max_blocks,
                                         const SeqReservation& future) const {
  if (!held) {
    return region_blocks(future) <= max_blocks ? region_tokens(future) : 0;
  }
  if (max_blocks >= kUnboundedBlocks) return kUnboundedBlocks;
  return known(seq, "max_end_tokens").region.num_blocks * block_size_;
}

int ReservingKvAllocator::blocks_to_hold(SeqId seq, bool held, int end,
                                         const SeqReservation& future) const {
  if (!held) return region_blocks(future);
  const SeqRegion& s = known(seq, "blocks_to_hold");
  return end <= s.region.num_blocks * block_size_ ? 0 : kUnboundedBlocks;
}

void ReservingKvAllocator::place(SeqId seq, Region region, uint64_t group, int final_tokens) {
  SeqRegion s;
  s.region = region;
  s.group = group;
  s.final_tokens = final_tokens;
  s.table.resize(region.num_blocks);
  for (int i = 0; i < region.num_blocks; ++i) s.table[i] = region.start + i;
  seqs_[seq] = std::move(s);
}

bool ReservingKvAllocator::reserve(SeqId seq, const SeqReservation& future) {
  if (seqs_.count(seq) != 0) {
    throw std::logic_error("ReservingKvAllocator::reserve: sequence " + std::to_string(seq) +
                           " already holds a region");
  }
  const int blocks = region_blocks(future);
  const int final_tokens =
      future.output_len_hint > 0 ? future.prompt_len + future.output_len_hint - 1 : 0;
  Group& group = groups_[future.group];
  group.final_tokens = final_tokens;
  // A spare kept by the group (sized alike) serves first.
  for (auto it = group.spares.begin(); it != group.spares.end(); ++it) {
    if (it->num_blocks < blocks) continue;
    place(seq, *it, future.group, final_tokens);
    group.spares.erase(it);
    return true;
  }
  // Else the sequence's region and the group's spares, all or nothing.
  int held = 0;
  for (const auto& [id, s] : seqs_) held += s.group == future.group ? 1 : 0;
  const int spares_needed =
      std::max(future.num_regions - held - 1, 0) - static_cast<int>(group.spares.size());
  std::vector<Region> taken;
  for (int i = 0; i < 1 + std::max(spares_needed, 0); ++i) {
    std::optional<Region> region = regions_.allocate(blocks, alignment(blocks));
    if (!region) {
      for (const Region& r : taken) regions_.free(r);
      if (held == 0 && group.spares.empty()) groups_.erase(future.group);
      return false;
    }
    taken.push_back(*region);
  }
  place(seq, taken.front(), future.group, final_tokens);
  group.spares.insert(group.spares.end(), taken.begin() + 1, taken.end());
  return true;
}

void ReservingKvAllocator::release_group(uint64_t group) {
  auto it = groups_.find(group);
  if (it == groups_.end()) return;
  for (const auto& [id, s] : seqs_) {
    if (s.group == group) {
      throw std::logic_error("ReservingKvAllocator::release_group: sequence " + std::to_string(id) +
                             " still holds a region");
    }
  }
  for (const Region& r : it->second.spares) regions_.free(r);
  groups_.erase(it);
}

ReservingKvAllocator::SeqRegion& ReservingKvAllocator::known(SeqId seq, const char* op) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    throw std::logic_error(std::string("ReservingKvAllocator::") + op + ": unknown sequence " +
                           std::to_string(seq));
  }
  return it->second;
}

const ReservingKvAllocator::SeqRegion& ReservingKvAllocator::known(SeqId seq,
                                                                   const char* op) const {
  return const_cast<ReservingKvAllocator*>(this)->known(seq, op);
}

AllocationResult ReservingKvAllocator::allocate(SeqId seq, std::span<const int32_t> tokens) {
  SeqRegion& s = known(seq, "allocate (reserve first)");
  if (s.allocated) {
    throw std::logic_error("ReservingKvAllocator::allocate: sequence " + std::to_string(seq) +
                           " is already allocated");
  }
  if (tokens.empty()) throw std::logic_error("ReservingKvAllocator::allocate: empty prompt");
  if (static_cast<int64_t>(tokens.size()) > int64_t{s.region.num_blocks} * block_size_) {
    throw std::runtime_error("ReservingKvAllocator::allocate: the prompt outgrows its region");
  }
  s.allocated = true;
  s.num_tokens = static_cast<int>(tokens.size());
  return {};
}

std::vector<BlockCopy> ReservingKvAllocator::append_token(SeqId seq, int32_t) {
  SeqRegion& s = known(seq, "append_token");
  if (!s.allocated) throw std::logic_error("ReservingKvAllocator::append_token: not allocated");
  if (s.num_tokens >= s.region.num_blocks * block_size_) {
    throw std::runtime_error("ReservingKvAllocator::append_token: sequence " + std::to_string(seq) +
                             " outgrew its region");
  }
  ++s.num_tokens;
  return {};
}

std::vector<BlockCopy> ReservingKvAllocator::fork(SeqId parent, SeqId child) {
  const SeqRegion& p = known(parent, "fork");
  if (!p.allocated) throw std::logic_error("ReservingKvAllocator::fork: parent not allocated");
  if (seqs_.count(child) != 0) throw std::logic_error("ReservingKvAllocator::fork: known child");
  const Region parent_region = p.region;
  const uint64_t group_id = p.group;
  const int num_tokens = p.num_tokens;
  const int final_tokens = p.final_tokens;
  std::optional<Region> region;
  Group& group = groups_[group_id];
  for (auto it = group.spares.begin(); it != group.spares.end(); ++it) {
    if (it->num_blocks < parent_region.num_blocks) continue;
    region = *it;
    group.spares.erase(it);
    break;
  }
  if (!region) {
    region = regions_.allocate(parent_region.num_blocks, alignment(parent_region.num_blocks));
  }
  if (!region) {
    throw std::runtime_error("ReservingKvAllocator::fork: no contiguous region of " +
                             std::to_string(parent_region.num_blocks) + " blocks is free");
  }
  place(child, *region, group_id, final_tokens);
  SeqRegion& c = seqs_.at(child);
  c.allocated = true;
  c.num_tokens = num_tokens;
  std::vector<BlockCopy> copies;
  for (int i = 0; i < blocks_for(num_tokens); ++i) {
    copies.push_back({parent_region.start + i, region->start + i});
  }
  return copies;
}

// The region goes back to its group while the group lives (a later fork reuses it), else to
// the pool.
void ReservingKvAllocator::free(SeqId seq) {
  const SeqRegion s = known(seq, "free");
  seqs_.erase(seq);
  auto group = groups_.find(s.group);
  if (group != groups_.end()) {
    group->second.spares.push_back(s.region);
  } else {
    regions_.free(s.region);
  }
}

std::vector<BlockCopy> ReservingKvAllocator::swap_out(SeqId) {
  throw std::logic_error("ReservingKvAllocator: the reserve-* allocators have no swap space");
}

std::vector<BlockCopy> ReservingKvAllocator::swap_in(SeqId) {
  throw std::logic_error("ReservingKvAllocator: the reserve-* allocators have no swap space");
}

bool ReservingKvAllocator::has_sequence(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it != seqs_.end() && it->second.allocated;
}

std::span<const BlockId> ReservingKvAllocator::block_table(SeqId seq) const {
  const SeqRegion& s = known(seq, "block_table");
  return std::span<const BlockId>(s.table).first(
      std::min<size_t>(s.table.size(), static_cast<size_t>(blocks_for(s.num_tokens))));
}

std::span<const BlockId> ReservingKvAllocator::cpu_block_table(SeqId) const {
  throw std::logic_error("ReservingKvAllocator: the reserve-* allocators have no swap space");
}

int ReservingKvAllocator::num_tokens(SeqId seq) const {
  return known(seq, "num_tokens").num_tokens;
}

std::optional<Region> ReservingKvAllocator::region_of(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return std::nullopt;
  return it->second.region;
}

int ReservingKvAllocator::num_spare_regions(uint64_t group) const {
  auto it = groups_.find(group);
  return it == groups_.end() ? 0 : static_cast<int>(it->second.spares.size());
}

// Each region splits into the tokens it holds, the slots its sequence will still fill (known
// only with the true output length) and the rest (internal fragmentation). Spare regions are
// reserved for forks. Free slots outside the largest hole are external fragmentation.
KvMemoryBreakdown ReservingKvAllocator::memory_breakdown() const {
  KvMemoryBreakdown out;
  const int64_t bs = block_size_;
  out.total_slots = int64_t{regions_.num_blocks()} * bs;
  for (const auto& [id, s] : seqs_) {
    const int64_t slots = int64_t{s.region.num_blocks} * bs;
    const int64_t held = s.allocated ? s.num_tokens : 0;
    out.token_slots += held;
    if (s.final_tokens > 0) {
      const int64_t final_slots = std::clamp<int64_t>(s.final_tokens, held, slots);
      out.reserved_slots += final_slots - held;
      out.internal_fragment_slots += slots - final_slots;
    } else {
      out.reserved_slots += slots - held;
    }
  }
  for (const auto& [id, group] : groups_) {
    for (const Region& r : group.spares) out.reserved_slots += int64_t{r.num_blocks} * bs;
  }
  const int64_t free_slots = int64_t{regions_.num_free_blocks()} * bs;
  out.free_slots = int64_t{regions_.largest_hole()} * bs;
  out.external_fragment_slots = free_slots - out.free_slots;
  return out;
}

int64_t ReservingKvAllocator::num_logical_blocks() const {
  int64_t total = 0;
  for (const auto& [id, s] : seqs_) total += s.allocated ? blocks_for(s.num_tokens) : 0;
  return total;
}

// ---- the factory ----

const char* kv_allocator_name(KvAllocatorKind kind) {
  switch (kind) {
    case KvAllocatorKind::kPaged:
      return "paged";
    case KvAllocatorKind::kReserveMax:
      return "reserve-max";
    case KvAllocatorKind::kReservePow2:
      return "reserve-pow2";
    case KvAllocatorKind::kReserveOracle:
      return "reserve-oracle";
  }
  return "?";
}

KvAllocatorKind parse_kv_allocator(std::string_view name) {
  for (KvAllocatorKind kind : {KvAllocatorKind::kPaged, KvAllocatorKind::kReserveMax,
                               KvAllocatorKind::kReservePow2, KvAllocatorKind::kReserveOracle}) {
    if (name == kv_allocator_name(kind)) return kind;
  }
  throw std::invalid_argument("unknown KV allocator '" + std::string(name) +
                              "' (known: paged, reserve-max, reserve-pow2, reserve-oracle)");
}

}  // namespace pagedserve::cache
