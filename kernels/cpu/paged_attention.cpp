// paged_attention: causal attention for a mixed batch of decode and prefill sequences whose
// keys and values live in a paged KV cache and are reached only through block tables.
//
// Each (query token, head) walks its sequence's blocks in order with an online softmax, as
// FlashAttention and vLLM's paged kernels do: per block it computes the block's scores, raises
// the running max if needed (rescaling the running sum and output by exp(old_max - new_max)),
// then accumulates exp(score - max) * v. One pass over K/V, no buffer sized by sequence length,
// and the CUDA kernel follows the same order, so this is its reference twin. A sliding window
// starts each query's walk at the block holding its first visible position, so a query costs
// O(window), not O(context); soft-capping bends each score before the max is taken.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

constexpr int kMaxBlockSize = 128;  // scores of one block live in a stack array
// Tasks paged_attention aims to give each thread, when it has to split KV heads to get them.
constexpr int kTasksPerThread = 2;

// K/V elements widened to float: exact for every dtype, so the arithmetic after the load is
// the float32 path's.
template <KvDtype kDtype>
inline float widen_16(uint16_t x) {
  return kDtype == KvDtype::kFloat16 ? f16_to_f32(x) : bf16_to_f32(x);
}

template <KvDtype kDtype>
struct KvElement {
  using Type = uint16_t;
  static float load(const Type* p, long i) { return widen_16<kDtype>(p[i]); }
};
template <>
struct KvElement<KvDtype::kFloat32> {
  using Type = float;
  static float load(const Type* p, long i) { return p[i]; }
};
template <>
struct KvElement<KvDtype::kInt8> {  // scaled per row by the caller
  using Type = int8_t;
  static float load(const Type* p, long i) { return static_cast<float>(p[i]); }
};

// dot(q, k) over n elements with independent partial sums, so the loop vectorises at -O3.
template <KvDtype kDtype>
float dot(const float* a, const typename KvElement<kDtype>::Type* b, int n) {
  constexpr int kLanes = 8;
  float lanes[kLanes] = {};
  const int n_vec = n - n % kLanes;
  for (int i = 0; i < n_vec; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += a[i + l] * KvElement<kDtype>::load(b, i + l);
  }
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  for (int i = n_vec; i < n; ++i) sum += a[i] * KvElement<kDtype>::load(b, i);
  return sum;
}

// Attention of one query head q ([head_dim]) at position `pos` over the blocks of one sequence
// (block_table: its row of block ids) for KV head kv_head; writes out ([head_dim]). Only the
// positions [first_visible_position(p, pos), pos] are read: blocks before the sliding window
// are skipped whole, and in the first block read, the positions before it.
template <KvDtype kDtype>
void attend_one(const PagedAttentionParams& p, const float* q, const int32_t* block_table, int pos,
                int kv_head, float* out) {
  using Element = typename KvElement<kDtype>::Type;
  const int d = p.head_dim;
  const long head_stride = static_cast<long>(p.block_size) * d;  // within a block
  const long block_stride = p.num_kv_heads * head_stride;        // between blocks
  float scores[kMaxBlockSize];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + d, 0.0f);  // out doubles as the unnormalised accumulator
  const int first_visible = detail::first_visible_position(p, pos);
  for (int b = first_visible / p.block_size; b <= pos / p.block_size; ++b) {
    const int32_t block_id = block_table[b];
    assert(block_id >= 0);
    const long base = block_id * block_stride + kv_head * head_stride;
    const Element* keys = static_cast<const Element*>(p.key_cache) + base;
    const Element* values = static_cast<const Element*>(p.value_cache) + base;
    // int8: row j's scale multiplies its dot product, and its softmax weight for the values.
    const float* key_scales = kDtype == KvDtype::kInt8 ? p.key_scales + base / d : nullptr;
    const float* value_scales = kDtype == KvDtype::kInt8 ? p.value_scales + base / d : nullptr;
    // Positions outside [first_visible, pos] are masked by not reading them at all.
    const int begin = std::max(0, first_visible - b * p.block_size);
    const int end = std::min(p.block_size, pos + 1 - b * p.block_size);
    float block_max = -std::numeric_limits<float>::infinity();
    for (int j = begin; j < end; ++j) {
      float dot_product = dot<kDtype>(q, keys + static_cast<long>(j) * d, d);
      if constexpr (kDtype == KvDtype::kInt8) dot_product *= key_scales[j];
      float score = dot_product * p.scale;
      if (p.logit_softcap > 0.0f) score = p.logit_softcap * std::tanh(score / p.logit_softcap);
      scores[j] = score;
      block_max = std::max(block_max, score);
    }
    if (block_max > running_max) {
      // exp(-inf) == 0 on the first block, which zeroes the (already zero) state harmlessly.
      const float rescale = std::exp(running_max - block_max);
      running_sum *= rescale;
      for (int i = 0; i < d; ++i) out[i] *= rescale;
      running_max = block_max;
    }
    for (int j = begin; j < end; ++j) {
      const float weight = std::exp(scores[j] - running_max);
      running_sum += weight;
      const Element* v = values + static_cast<long>(j) * d;
      const float value_weight = kDtype == KvDtype::kInt8 ? weight * value_scales[j] : weight;
      for (int i = 0; i < d; ++i) out[i] += value_weight * KvElement<kDtype>::load(v, i);
    }
  }
  const float inv_sum = 1.0f / running_sum;
  for (int i = 0; i < d; ++i) out[i] *= inv_sum;
}

template <KvDtype kDtype>
void attend_heads_portable_typed(const PagedAttentionParams& p, const float* q,
                                 const int32_t* block_table, int first_pos, int num_queries,
                                 int first_kv_head, int num_kv_heads, float* out) {
  const long token_stride = static_cast<long>(p.num_heads) * p.head_dim;
  const int group = p.num_heads / p.num_kv_heads;
  for (int t = 0; t < num_queries; ++t) {
    for (int kv = first_kv_head; kv < first_kv_head + num_kv_heads; ++kv) {
      for (int h = kv * group; h < (kv + 1) * group; ++h) {
        const long offset = t * token_stride + static_cast<long>(h) * p.head_dim;
        attend_one<kDtype>(p, q + offset, block_table, first_pos + t, kv, out + offset);
      }
    }
  }
}

}  // namespace

namespace detail {

void attend_heads_portable(const PagedAttentionParams& p, const float* q,
                           const int32_t* block_table, int first_pos, int num_queries,
                           int first_kv_head, int num_kv_heads, float* out) {
  switch (p.kv_dtype) {
    case KvDtype::kFloat16:
      return attend_heads_portable_typed<KvDtype::kFloat16>(
          p, q, block_table, first_pos, num_queries, first_kv_head, num_kv_heads, out);
    case KvDtype::kBFloat16:
      return attend_heads_portable_typed<KvDtype::kBFloat16>(
          p, q, block_table, first_pos, num_queries, first_kv_head, num_kv_heads, out);
    case KvDtype::kInt8:
      return attend_heads_portable_typed<KvDtype::kInt8>(p, q, block_table, first_pos, num_queries,
                                                         first_kv_head, num_kv_heads, out);
    default:
      return attend_heads_portable_typed<KvDtype::kFloat32>(
          p, q, block_table, first_pos, num_queries, first_kv_head, num_kv_heads, out);
  }
}

}  // namespace detail

void paged_attention(const PagedAttentionParams& p, ThreadPool* pool, Isa isa) {
  assert(p.query != nullptr && p.out != nullptr && p.query != p.out);
  assert(p.key_cache != nullptr && p.value_cache != nullptr);
  assert(p.kv_dtype != KvDtype::kInt8 || (p.key_scales != nullptr && p.value_scales != nullptr));
  assert(p.query_start_loc != nullptr && p.seq_lens != nullptr && p.block_tables != nullptr);
  assert(p.num_seqs >= 0 && p.head_dim > 0);
  assert(p.block_size >= 1 && p.block_size <= kMaxBlockSize);
  assert(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0);
  assert(isa_supported(isa));
  const auto attend =
      isa == Isa::kAvx512 ? detail::attend_heads_avx512 : detail::attend_heads_portable;
  const long token_stride = static_cast<long>(p.num_heads) * p.head_dim;
  const int num_tokens = p.query_start_loc[p.num_seqs];
  assert(p.sliding_window >= 0 && p.logit_softcap >= 0.0f);
  double flops = 0;  // rough: every query reads its whole context (or window) once per head
  for (int s = 0; s < p.num_seqs; ++s) {
    const int q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
    assert(q_len >= 0 && p.seq_lens[s] >= q_len);
    assert((p.seq_lens[s] + p.block_size - 1) / p.block_size <= p.max_blocks_per_seq);
    const int context =
        p.sliding_window > 0 ? std::min(p.seq_lens[s], p.sliding_window) : p.seq_lens[s];
    flops += 4.0 * q_len * context * p.num_heads * p.head_dim;
  }
  // One task per (tile of up to kAttentionQueryTile query tokens of one sequence, range of KV
  // heads). A tile shares each block's K/V loads between its queries and the heads of each GQA
  // group. The KV heads of one block are contiguous ([num_kv_heads, block_size, head_dim]), so
  // a task that walks all of them reads K and V in long runs the hardware prefetchers follow,
  // where one head alone is a 4 KiB island per block (16 tokens x 64 dims of float): on this
  // machine's AMD EPYC one core streams scattered 4 KiB runs at ~18 GB/s, 48 KiB runs at ~32.
  // So heads are split only as far as it takes to give every thread a few tasks (a batch-1
  // decode), and tasks are handed out one at a time, which balances long and short contexts.
  // Tasks are indexed by (token, KV-head range); only a tile's first token does work.
  int num_tiles = 0;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
    num_tiles += (q_len + detail::kAttentionQueryTile - 1) / detail::kAttentionQueryTile;
  }
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  const int wanted_splits =
      num_tiles == 0 ? 1 : (kTasksPerThread * threads + num_tiles - 1) / num_tiles;
  const int kv_per_task = (p.num_kv_heads + std::min(wanted_splits, p.num_kv_heads) - 1) /
                          std::min(wanted_splits, p.num_kv_heads);
  const int kv_splits = (p.num_kv_heads + kv_per_task - 1) / kv_per_task;
  parallel_for(pool, int64_t{num_tokens} * kv_splits, flops, [&](int64_t task) {
    const int64_t token = task / kv_splits;
    const int first_kv_head = static_cast<int>(task % kv_splits) * kv_per_task;
    const int num_kv_heads = std::min(kv_per_task, p.num_kv_heads - first_kv_head);
    const int32_t* next_start =
        std::upper_bound(p.query_start_loc, p.query_start_loc + p.num_seqs + 1, token);
    const int s = static_cast<int>(next_start - p.query_start_loc) - 1;
    const int index_in_seq = static_cast<int>(token - p.query_start_loc[s]);
    if (index_in_seq % detail::kAttentionQueryTile != 0) return;
    const int q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
    const int num_queries = std::min(detail::kAttentionQueryTile, q_len - index_in_seq);
    const int first_pos = p.seq_lens[s] - q_len + index_in_seq;
    const int32_t* block_table = p.block_tables + static_cast<long>(s) * p.max_blocks_per_seq;
    const long offset = token * token_stride;
    attend(p, p.query + offset, block_table, first_pos, num_queries, first_kv_head, num_kv_heads,
           p.out + offset);
  });
}

}  // namespace pagedserve::kernels
