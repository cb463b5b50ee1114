// CUDA kernels for the Llama forward pass and for sampling: the device twins of kernels/cpu/
// (same layouts, same semantics; the GPU tests compare each one against its CPU twin). Every
// launcher enqueues work on `stream`, never synchronises, and returns the launch status
// (cudaGetLastError), so a bad configuration surfaces at the call. Activations are float32;
// weights may be float32, float16 or bfloat16 and the KV cache float32, float16, bfloat16 or
// fp8 e4m3 (with one scale per tensor). This header is plain C++ (host compilers include it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pagedserve::kernels::cuda {

enum class DType { kFloat32, kFloat16, kBFloat16, kFp8E4M3 };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// ---- element-wise and row-wise kernels (float32 in and out unless said otherwise) ----

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]; out may alias x.
cudaError_t rms_norm(const float* x, const float* weight, float* out, int num_rows, int hidden,
                     float eps, cudaStream_t stream);
// Rotate-half rotary embedding in place; q: [num_tokens, num_heads, head_dim], k: [num_tokens,
// num_kv_heads, head_dim], positions: [num_tokens] (all device pointers).
cudaError_t rope_rotate_half(float* q, float* k, const int32_t* positions, int num_tokens,
                             int num_heads, int num_kv_heads, int head_dim, float theta,
                             cudaStream_t stream);
// The rotary embedding of any family (kernels::rope_cos_sin_inv_freq followed by
// kernels::rope_rotate_half_partial): the first rotary_dim dimensions of each head rotate by
// position * inv_freq[i] (angles in double), cos and sin times attention_factor. inv_freq
// ([rotary_dim / 2], device) null means theta^(-2i / rotary_dim), the plain Llama frequencies.
// LongRoPE gives a second table: tokens t with uses_long[t] != 0 rotate by inv_freq_long.
struct RopeArgs {
  int rotary_dim = 0;
  const float* inv_freq = nullptr;
  float theta = 10000.0f;
  float attention_factor = 1.0f;
  const float* inv_freq_long = nullptr;  // [rotary_dim / 2], device; null: no second table
  const int32_t* uses_long = nullptr;    // [num_tokens], device; with inv_freq_long
};
cudaError_t rope_rotate_half_partial(float* q, float* k, const int32_t* positions, int num_tokens,
                                     int num_heads, int num_kv_heads, int head_dim,
                                     const RopeArgs& rope, cudaStream_t stream);
// The fused q/k/v projection [num_tokens, q_width + 2 kv_width] (plus `bias`, same width, when
// not null) split into q [num_tokens, q_width], k and v [num_tokens, kv_width].
cudaError_t split_qkv(const float* qkv, const float* bias, float* q, float* k, float* v,
                      int num_tokens, int q_width, int kv_width, cudaStream_t stream);
// The gated MLP's activation over the fused gate/up projection: gate_up[t] = [gate | up], each
// `ffn` wide, plus `bias` ([2 ffn]) when not null; out[t, i] = act(gate) * up with act silu
// (SwiGLU) or gelu_tanh (GeGLU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
enum class GatedActivation { kSilu, kGeluTanh };
cudaError_t gated_activation(const float* gate_up, const float* bias, float* out, int num_tokens,
                             int ffn, GatedActivation activation, cudaStream_t stream);
// x[r, :] += bias[:] for r < num_rows.
cudaError_t add_bias(float* x, const float* bias, int num_rows, int width, cudaStream_t stream);
// x[i] += y[i].
cudaError_t add(float* x, const float* y, int64_t n, cudaStream_t stream);
// x[i] *= factor.
cudaError_t scale(float* x, int64_t n, float factor, cudaStream_t stream);
// x[i] = cap * tanh(x[i] / cap) (Gemma 2's final logit soft-capping), cap > 0.
cudaError_t soft_cap(float* x, int64_t n, float cap, cudaStream_t stream);
// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
cudaError_t silu_and_mul(const float* gate, const float* up, float* out, int64_t n,
                         cudaStream_t stream);
// out[t, :] = table[ids[t], :] converted to float; ids must be in [0, vocab) (checked by the
// caller on the host). table: [vocab, hidden] of `table_dtype` (float32, float16, bfloat16).
cudaError_t embedding(const int32_t* ids, const void* table, DType table_dtype, float* out,
                      int num_tokens, int hidden, cudaStream_t stream);
// out[i] = in[i] converted to `out_dtype` (float32, float16 or bfloat16): the GEMM inputs.
cudaError_t convert_floats(const float* in, void* out, DType out_dtype, int64_t n,
                           cudaStream_t stream);
// out[r, :] = in[rows[r], :] for r < num_rows.
cudaError_t gather_rows(const float* in, const int32_t* rows, float* out, int num_rows, int width,
                        cudaStream_t stream);

// ---- paged KV cache ----

// One layer's cache: [num_blocks, num_kv_heads, block_size, head_dim] of `dtype` for keys and
// the same for values. fp8 stores x / scale; reads return stored * scale.
struct KvCacheLayout {
  void* key = nullptr;
  void* value = nullptr;
  DType dtype = DType::kFloat32;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// Writes key/value [num_tokens, num_kv_heads, head_dim] into the slots of slot_mapping
// (block * block_size + offset; negative = skip).
cudaError_t write_kv(const float* key, const float* value, const int64_t* slot_mapping,
                     int num_tokens, const KvCacheLayout& cache, cudaStream_t stream);

// Copies whole blocks: for every pair (src, dst) in `pairs` ([num_pairs, 2], device) and every
// buffer in `buffers` ([num_buffers] device pointers to pools, each laid out as blocks of
// `bytes_per_block`), buffer[dst] = buffer[src]. Copy-on-write uses it with every layer's key
// and value pool.
cudaError_t copy_blocks(void* const* buffers, int num_buffers, const int32_t* pairs, int num_pairs,
                        size_t bytes_per_block, cudaStream_t stream);

// ---- attention ----

// Query rows one thread block handles: rows are (query token, query head) pairs of one KV head,
// so one block shares its K/V tiles among the heads of a GQA group and successive tokens.
constexpr int kAttentionRowsPerBlock = 8;

// The thread blocks of one attention launch per KV head, as (sequence, first row) pairs where a
// sequence's rows are numbered token * group + head_in_group, group = num_heads / num_kv_heads.
// query_start_loc is the host copy ([num_seqs + 1]).
std::vector<int32_t> attention_work_items(const int32_t* query_start_loc, int num_seqs, int group);

// Paged attention over a batch mixing decode, prefill and prefill chunks, with the semantics of
// kernels::paged_attention (causal, GQA, K/V only through block tables, optional sliding window
// and attention-logit soft-capping). With partition_size
// > 0 the context is split into partitions of that many tokens computed in parallel and merged
// by a second kernel (split-K, for long contexts with few sequences); partial_* must then hold
// num_tokens * num_heads * num_partitions (* head_dim for partial_out) floats.
struct AttentionParams {
  const float* query = nullptr;  // [num_tokens, num_heads, head_dim], device
  float* out = nullptr;          // [num_tokens, num_heads, head_dim], device
  KvCacheLayout cache;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1], device
  const int32_t* seq_lens = nullptr;         // [num_seqs], device
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq], device
  const int32_t* work_items = nullptr;       // attention_work_items, device
  int num_work_items = 0;
  int num_tokens = 0;
  int num_seqs = 0;  // with num_tokens == num_seqs (decode only), the decode kernel runs
  // The decode kernel (K/V tiles copied to shared memory in two stages, all heads of a GQA
  // group per block) for decode-only batches with head_dim 64, 128 or 256 (not float32) and at
  // most 8 query heads per KV head; false: always the tiled one.
  bool use_decode_kernel = true;
  int max_blocks_per_seq = 0;
  int num_heads = 0;
  float scale = 1.0f;
  // As kernels::PagedAttentionParams: when > 0 the query at position i sees only positions j
  // with i - sliding_window < j <= i, and tiles before every row's window are not read.
  int sliding_window = 0;
  // As kernels::PagedAttentionParams: when > 0, scores become cap * tanh(score / cap).
  float logit_softcap = 0.0f;
  int max_seq_len = 0;     // longest seq_lens entry (sets the number of partitions)
  int partition_size = 0;  // 0: one pass, no split
  float* partial_out = nullptr;
  float* partial_max = nullptr;
  float* partial_sum = nullptr;
};
int attention_num_partitions(int max_seq_len, int partition_size);
// head_dim 64, 128 and 256 have specialised kernels; any other head_dim up to 128 runs a generic
// one.
cudaError_t paged_attention(const AttentionParams& params, cudaStream_t stream);

// ---- sampling (kernels/cuda/sampling.cu) ----

// argmax of each row (the lowest id among ties, as the CPU sampler).
cudaError_t argmax_rows(const float* logits, int num_rows, int vocab, int32_t* out,
                        cudaStream_t stream);
// lse[r] = log(sum(exp(logits[r, :]))), in double like the CPU sampler.
cudaError_t log_sum_exp_rows(const float* logits, int num_rows, int vocab, double* lse,
                             cudaStream_t stream);

// One logit change from penalties or bans, in the CPU sampler's order: repetition penalty when
// `repeated`, then presence/frequency when count > 0, then -inf when `banned`. Entries are
// unique per (row, token).
struct LogitAdjustment {
  int32_t row = 0;
  int32_t token = 0;
  int32_t count = 0;  // occurrences in the output so far
  int32_t repeated = 0;
  int32_t banned = 0;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};
cudaError_t adjust_logits(float* logits, int vocab, const LogitAdjustment* adjustments, int count,
                          cudaStream_t stream);

// Grammar masks (structured outputs), the twin of kernels::apply_token_bitmask: for each m <
// num_masked, row rows[m] of logits ([*, vocab]) gets -inf at every id whose bit in
// bitmasks[m * words_per_row ...] is clear and at every id >= allowed_ids[m] (past the
// grammar's vocabulary). words_per_row >= (min(vocab, allowed_ids[m]) + 31) / 32. Rows must
// be distinct. All pointers are device pointers.
cudaError_t apply_token_bitmask(float* logits, int vocab, const int32_t* rows,
                                const uint32_t* bitmasks, int words_per_row,
                                const int32_t* allowed_ids, int num_masked, cudaStream_t stream);

// Sorting for non-greedy sampling and for top logprobs: segment s holds row seg_rows[s] of
// `logits`, each divided by seg_temperatures[s], sorted in descending order with ties in
// ascending id order (a stable radix sort), exactly the CPU sampler's candidate order.
struct SortBuffers {
  float* keys_in = nullptr;    // [num_segments * vocab]
  float* keys_out = nullptr;   // [num_segments * vocab]
  int32_t* ids_in = nullptr;   // [num_segments * vocab]
  int32_t* ids_out = nullptr;  // [num_segments * vocab]
  int32_t* offsets = nullptr;  // [num_segments + 1], written by sort_segments
  void* temp = nullptr;
  size_t temp_bytes = 0;
};
size_t sort_temp_bytes(int num_segments, int vocab);
cudaError_t sort_segments(const float* logits, int vocab, const int32_t* seg_rows,
                          const float* seg_temperatures, int num_segments, SortBuffers& buffers,
                          cudaStream_t stream);

// One token to draw from a sorted segment with the CPU sampler's top-k, top-p, min-p and
// inverse-CDF draw keyed by uniform_from_counter(seed, step).
struct SampleDraw {
  int32_t segment = 0;
  int32_t row = 0;  // row of the raw logits (for the logprob)
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t step = 0;
};
// tokens[d] and logprobs[d] (log_softmax of the raw logits row, with lse from
// log_sum_exp_rows) for every draw.
cudaError_t sample_sorted(const float* sorted_keys, const int32_t* sorted_ids, int vocab,
                          const SampleDraw* draws, int num_draws, const float* logits,
                          const double* lse, int32_t* tokens, float* logprobs, cudaStream_t stream);
// logprobs[i] = logits[rows[i], tokens[i]] - lse[rows[i]].
cudaError_t token_logprobs(const float* logits, int vocab, const double* lse, const int32_t* rows,
                           const int32_t* tokens, int n, float* logprobs, cudaStream_t stream);

}  // namespace pagedserve::kernels::cuda
