// Fuzzes the KV memory-op applier (cache/kv_memory_ops.h) with random op lists against every
// allocator: the pool's shape (block size, device and CPU blocks, prefix caching, sliding
// window, allocator kind) comes from the first bytes, then ops over a few sequence ids and a
// two-token alphabet (so prompts share prefixes and the prefix cache is exercised).
//
// Checks: an op the allocator refuses throws std::logic_error or std::runtime_error (as
// documented) and leaves the allocator consistent; after every op the paged BlockManager's
// check_invariants() holds, free + used device blocks = the pool, the memory breakdown's five
// parts sum to its total, every live table has a block per block_size tokens (paged) with ids
// inside the pool; and once every sequence is freed and every group released, no block is
// held: no leak, whatever came before.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <stdexcept>

#include "cache/kv_allocator.h"
#include "cache/kv_memory_ops.h"
#include "tests/fuzz/fuzz_util.h"

using namespace pagedserve;
using namespace pagedserve::cache;

namespace {

constexpr SeqId kMaxSeq = 6;
constexpr uint64_t kMaxGroup = 3;

std::vector<int32_t> tokens_from(FuzzedDataProvider& in) {
  std::vector<int32_t> tokens(in.ConsumeIntegralInRange<size_t>(0, 40));
  const uint64_t bits = in.ConsumeIntegral<uint64_t>();
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((bits >> i) & 1);
  return tokens;
}

KvMemoryOp op_from(FuzzedDataProvider& in) {
  const SeqId seq = in.ConsumeIntegralInRange<SeqId>(0, kMaxSeq);
  switch (in.ConsumeIntegralInRange<int>(0, 11)) {
    case 0: {
      SeqReservation r;
      r.group = in.ConsumeIntegralInRange<uint64_t>(0, kMaxGroup);
      r.prompt_len = in.ConsumeIntegralInRange<int>(0, 48);
      r.current_len = r.prompt_len + in.ConsumeIntegralInRange<int>(0, 8);
      r.max_output_len = in.ConsumeIntegralInRange<int>(0, 48);
      r.output_len_hint = in.ConsumeIntegralInRange<int>(0, 48);
      r.max_model_len = in.ConsumeIntegralInRange<int>(0, 128);
      r.num_regions = in.ConsumeIntegralInRange<int>(1, 3);
      return KvMemoryOp::reserve(seq, r);
    }
    case 1: {
      std::vector<int32_t> tokens = tokens_from(in);
      const int compute = in.ConsumeIntegralInRange<int>(-1, 48);
      const int cap = in.ConsumeIntegralInRange<int>(-1, 48);
      return KvMemoryOp::allocate(seq, std::move(tokens), compute, cap);
    }
    case 2:
      return KvMemoryOp::append(seq, in.ConsumeIntegralInRange<int32_t>(0, 1));
    case 3:
      return KvMemoryOp::append_pending(seq);
    case 4:
      return KvMemoryOp::resolve_pending(seq, in.ConsumeIntegralInRange<int32_t>(0, 1));
    case 5:
      return KvMemoryOp::fork(seq, in.ConsumeIntegralInRange<SeqId>(0, kMaxSeq));
    case 6:
      return KvMemoryOp::free(seq);
    case 7:
      return KvMemoryOp::release_group(in.ConsumeIntegralInRange<uint64_t>(0, kMaxGroup));
    case 8:
      return KvMemoryOp::swap_out(seq);
    case 9:
      return KvMemoryOp::swap_in(seq);
    case 10:
      return KvMemoryOp::probe_prefix(0, seq, tokens_from(in));
    default:
      return KvMemoryOp::release_before_window(seq);
  }
}

void check_consistent(const KvAllocator& kv, const std::string& after) {
  if (const BlockManager* bm = kv.block_manager()) {
    const std::string broken = bm->check_invariants();
    FUZZ_CHECK(broken.empty(), after + ": " + broken);
  }
  const int total = kv.num_total_device_blocks();
  FUZZ_CHECK(kv.num_free_device_blocks() + kv.num_used_device_blocks() == total,
             after + ": free + used != total");
  const KvMemoryBreakdown b = kv.memory_breakdown();
  FUZZ_CHECK(b.token_slots + b.reserved_slots + b.internal_fragment_slots +
                     b.external_fragment_slots + b.free_slots ==
                 b.total_slots,
             after + ": the memory breakdown does not sum to its total");
  FUZZ_CHECK(b.total_slots == int64_t{total} * kv.block_size(), after + ": total slots");
  for (SeqId seq = 0; seq <= kMaxSeq; ++seq) {
    if (!kv.has_sequence(seq)) continue;
    const BlockManager* bm = kv.block_manager();
    if (bm && bm->is_swapped(seq)) continue;
    const std::span<const BlockId> table = kv.block_table(seq);
    if (bm) {
      const int tokens = kv.num_tokens(seq);
      FUZZ_CHECK(static_cast<int>(table.size()) == (tokens + kv.block_size() - 1) / kv.block_size(),
                 after + ": table size of sequence " + std::to_string(seq));
    }
    for (BlockId id : table) {
      FUZZ_CHECK(id == kNoBlock || (id >= 0 && id < total), after + ": block id out of the pool");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  BlockManagerConfig config;
  config.block_size = in.ConsumeIntegralInRange<int>(1, 8);
  config.num_device_blocks = in.ConsumeIntegralInRange<int>(1, 24);
  config.num_cpu_blocks = in.ConsumeIntegralInRange<int>(0, 12);
  config.enable_prefix_caching = in.ConsumeBool();
  config.watermark = in.ConsumeBool() ? 0.0 : 0.1;
  config.sliding_window = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<int>(1, 20);
  config.buddy_regions = in.ConsumeBool();
  const auto kind = static_cast<KvAllocatorKind>(in.ConsumeIntegralInRange<int>(0, 3));
  if (kind != KvAllocatorKind::kPaged) config.sliding_window = 0;
  std::unique_ptr<KvAllocator> kv = make_kv_allocator(kind, config);

  KvMemoryApplier applier(*kv);
  for (int i = 0; i < 200 && in.remaining_bytes() > 0; ++i) {
    const KvMemoryOp op = op_from(in);
    try {
      applier.apply(op);
    } catch (const std::logic_error&) {
      // an op the allocator refuses: documented
    } catch (const std::runtime_error&) {
      // out of blocks: documented for allocate / append / swap
    }
    check_consistent(*kv, std::string("after ") + kv_op_name(op.kind) + " of sequence " +
                              std::to_string(op.seq));
    if (in.ConsumeBool()) applier.finish();
  }
  applier.finish();

  // Also the sequences reserved but never allocated (has_sequence() false): free undoes reserve.
  for (SeqId seq = 0; seq <= kMaxSeq; ++seq) {
    try {
      kv->free(seq);
    } catch (const std::logic_error&) {
      FUZZ_CHECK(!kv->has_sequence(seq), "free of a live sequence threw");
    }
  }
  for (uint64_t group = 0; group <= kMaxGroup; ++group) kv->release_group(group);
  check_consistent(*kv, "after freeing everything");
  FUZZ_CHECK(kv->num_used_device_blocks() == 0,
             std::to_string(kv->num_used_device_blocks()) + " device blocks leaked");
  FUZZ_CHECK(
      kv->num_free_cpu_blocks() == (kind == KvAllocatorKind::kPaged ? config.num_cpu_blocks : 0),
      "CPU blocks leaked");
  return 0;
}
