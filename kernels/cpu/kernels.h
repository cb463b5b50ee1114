// CPU kernels for the Llama forward pass: the reference twins of the CUDA kernels and the
// compute of the CPU executor. All tensors are row-major float32; shapes are given in comments
// as [dim0, dim1, ...]. Kernels never allocate and never throw; preconditions are asserts.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_dtype.h"

namespace pagedserve::kernels {

class ThreadPool;  // kernels/cpu/thread_pool.h; kernels taking one split their work over it

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]
// x, out: [num_rows, hidden]; weight: [hidden]. out may alias x.
void rms_norm(const float* x, const float* weight, float* out, int num_rows, int hidden, float eps);

// Fused residual add and RMSNorm, one pass over the residual stream:
// x[r, :] += delta[r, :], then out[r, :] = rms_norm(x[r, :]) * weight[:].
// x, delta, out: [num_rows, hidden]; out must not alias x or delta.
void add_rms_norm(float* x, const float* delta, const float* weight, float* out, int num_rows,
                  int hidden, float eps);

// Rotary embedding in Hugging Face's rotate-half layout, applied in place.
// For each head, pairs (i, i + head_dim/2) rotate by angle pos * theta^(-2i/head_dim).
// q: [num_tokens, num_heads, head_dim]; k: [num_tokens, num_kv_heads, head_dim];
// positions: [num_tokens].
// With a pool, tokens are split across threads (each token's rotation is unchanged).
void rope_rotate_half(float* q, float* k, const int32_t* positions, int num_tokens, int num_heads,
                      int num_kv_heads, int head_dim, float theta, ThreadPool* pool = nullptr);

// rope_rotate_half in two steps, so a forward pass computes the trigonometry once for all its
// layers: rope_cos_sin fills cos_sin ([num_tokens, head_dim]: the cos of pair i at [t, i], its
// sin at [t, head_dim/2 + i]); rope_rotate_half_table applies it. Together they give exactly
// rope_rotate_half's bits (it is implemented with them).
void rope_cos_sin(const int32_t* positions, int num_tokens, int head_dim, float theta,
                  float* cos_sin, ThreadPool* pool = nullptr);
void rope_rotate_half_table(float* q, float* k, const float* cos_sin, int num_tokens, int num_heads,
                            int num_kv_heads, int head_dim, ThreadPool* pool = nullptr);

// Rotary embedding with a precomputed frequency table, for the RoPE variants of Llama 3,
// YaRN, LongRoPE, linear and dynamic NTK scaling (the model computes inv_freq). Fills cos_sin
// ([num_tokens, rotary_dim]: cos(pos * inv_freq[i]) * attention_factor at [t, i], the sin at
// [t, rotary_dim/2 + i], for i < rotary_dim/2). inv_freq_per_token, when not null, gives each
// token its own table ([num_tokens] pointers to rotary_dim/2 floats; LongRoPE picks short or
// long factors per sequence); otherwise every token uses inv_freq.
void rope_cos_sin_inv_freq(const int32_t* positions, int num_tokens, int rotary_dim,
                           const float* inv_freq, const float* const* inv_freq_per_token,
                           float attention_factor, float* cos_sin, ThreadPool* pool = nullptr);
// rope_rotate_half_table over the first rotary_dim of each head's head_dim values (partial
// rotary, Phi-4-mini and others: pairs (i, i + rotary_dim/2)); the rest pass unchanged.
// cos_sin: [num_tokens, rotary_dim]. k may be null (rotate q only).
void rope_rotate_half_partial(float* q, float* k, const float* cos_sin, int num_tokens,
                              int num_heads, int num_kv_heads, int head_dim, int rotary_dim,
                              ThreadPool* pool = nullptr);

// Per-head RMSNorm in place (Qwen3 and Gemma 3 q/k norms): each head_dim slice of x
// ([num_rows * num_heads, head_dim] viewed flat) becomes rms_norm(slice) * weight[:].
void rms_norm_heads(float* x, const float* weight, int num_rows, int num_heads, int head_dim,
                    float eps);

// x[r, :] += bias[:] for r < num_rows. x: [num_rows, width].
void add_bias(float* x, const float* bias, int num_rows, int width);

// x[i] = cap * tanh(x[i] / cap): Gemma 2's final-logit soft-capping. cap > 0.
// Isa::kAvx512 uses a vectorised tanh (within ~1e-7 of std::tanh's, the same whatever the split);
// the other ISAs use std::tanh.
void soft_cap(float* x, int64_t n, float cap, ThreadPool* pool = nullptr, Isa isa = Isa::kPortable);

// out = x * w^T, the layout of a Hugging Face Linear layer, on unpacked float32 weights (for
// weights used once; the executor's layers use matmul_packed in packed_matmul.h).
// x: [m, k]; w: [n, k]; out: [m, n]. With a pool, rows of w (columns of out) are split across
// threads, so each weight is still read once per call.
void matmul_nt(const float* x, const float* w, float* out, int m, int n, int k,
               ThreadPool* pool = nullptr);

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)). out may alias gate or up.
void silu_and_mul(const float* gate, const float* up, float* out, int64_t n);

// The gated activation over a stacked gate/up projection, one pass:
// out[r, i] = silu(gate_up[r, i]) * gate_up[r, ffn + i]. gate_up: [num_rows, 2 ffn];
// out: [num_rows, ffn], not aliasing gate_up.
// With a pool, rows are split across threads (each element's arithmetic is unchanged).
// Isa::kAvx512 uses a vectorised exp (a different rounding from std::exp, the same whatever the
// rows or the split); the other ISAs use std::exp.
void silu_and_mul_stacked(const float* gate_up, float* out, int num_rows, int ffn,
                          ThreadPool* pool = nullptr, Isa isa = Isa::kPortable);

// GeGLU over a stacked gate/up projection (Gemma): out[r, i] = gelu_tanh(gate_up[r, i]) *
// gate_up[r, ffn + i], gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the
// "gelu_pytorch_tanh" of Hugging Face configs. Shapes and threading as silu_and_mul_stacked.
// Isa::kAvx512 evaluates it as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) with a vectorised
// exp (the same function, other rounding); the other ISAs use std::tanh.
void gelu_tanh_and_mul_stacked(const float* gate_up, float* out, int num_rows, int ffn,
                               ThreadPool* pool = nullptr, Isa isa = Isa::kPortable);

// One layer's paged KV cache. Block b holds block_size consecutive token positions of one
// sequence; token slot s lives in block s / block_size at offset s % block_size. Elements are
// float, uint16_t bit patterns of float16 / bfloat16, or int8 with one float scale per
// (token, KV head) row, as dtype says.
struct KvCacheView {
  void* key = nullptr;    // [num_blocks, num_kv_heads, block_size, head_dim]
  void* value = nullptr;  // [num_blocks, num_kv_heads, block_size, head_dim]
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  KvDtype dtype = KvDtype::kFloat32;
  // int8 only: each row's scale, [num_blocks, num_kv_heads, block_size] (the element offset of
  // a row divided by head_dim); null for the other dtypes.
  float* key_scales = nullptr;
  float* value_scales = nullptr;
};

// Writes new keys and values into their cache slots, rounded to the cache's dtype (to nearest
// even: f32_to_f16 / f32_to_bf16 in kv_dtype.h; every isa gives the same bits), or for int8
// quantized per row by quantize_kv_row_int8.
// key, value: [num_tokens, num_kv_heads, head_dim]; slot_mapping: [num_tokens], a slot is
// block_id * block_size + offset; a negative slot means "skip this token" (padding).
void write_kv(const float* key, const float* value, const int64_t* slot_mapping, int num_tokens,
              const KvCacheView& cache, Isa isa = best_isa());

// Attention over a batch of sequences whose K/V are read only through their block tables.
// Sequence s contributes query_start_loc[s+1] - query_start_loc[s] = q_len query tokens (1 for
// decode, many for prefill or a prefill chunk) and has seq_lens[s] tokens of context in the
// cache including those queries. Its query i sits at position seq_lens[s] - q_len + i and
// attends causally to positions [0, that position]. Grouped-query attention: query head h
// reads KV head h / (num_heads / num_kv_heads).
struct PagedAttentionParams {
  const float* query = nullptr;              // [num_tokens, num_heads, head_dim]
  float* out = nullptr;                      // [num_tokens, num_heads, head_dim]
  const void* key_cache = nullptr;           // [num_blocks, num_kv_heads, block_size, head_dim]
  const void* value_cache = nullptr;         // [num_blocks, num_kv_heads, block_size, head_dim]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1], prefix sums of q_len
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  float scale = 1.0f;                    // usually 1 / sqrt(head_dim)
  KvDtype kv_dtype = KvDtype::kFloat32;  // element type of key_cache and value_cache
  // int8 only: the rows' scales (KvCacheView::key_scales, value_scales).
  const float* key_scales = nullptr;
  const float* value_scales = nullptr;
  // Sliding-window attention (Mistral, Gemma's local layers, ...): when > 0 the query at
  // position i sees only keys at positions j with i - sliding_window < j <= i (Hugging Face's
  // mask), and blocks wholly before the window are not read. 0: the whole context.
  int sliding_window = 0;
  // Attention-logit soft-capping (Gemma 2): when > 0 each score s = scale * q.k becomes
  // logit_softcap * tanh(s / logit_softcap) before the softmax. 0: none.
  float logit_softcap = 0.0f;
};
// With a pool, (query tile, range of KV heads) pairs are split across threads, so a single
// decode token still uses every thread while a large batch walks each block's K/V of all heads
// contiguously. Each (token, head) is computed by one thread in an order fixed by its own
// sequence (block by block), so results do not depend on the rest of the batch or the split.
// 16-bit K/V are widened exactly to float before any arithmetic, so a 16-bit cache gives what
// a float32 cache holding the same (rounded) values gives. isa picks the inner loops (AVX-512,
// or the portable ones for anything else).
void paged_attention(const PagedAttentionParams& params, ThreadPool* pool = nullptr,
                     Isa isa = best_isa());

namespace detail {
// Attention of num_queries consecutive query tokens of one sequence (at positions first_pos,
// first_pos + 1, ...) for every query head reading the KV heads [first_kv_head,
// first_kv_head + num_kv_heads), over the sequence's blocks (block_table: its row). q and out
// point at the first token's head 0; tokens are num_heads * head_dim (of params) apart. Each
// (token, head) result is what that token alone would get.
void attend_heads_portable(const PagedAttentionParams& p, const float* q,
                           const int32_t* block_table, int first_pos, int num_queries,
                           int first_kv_head, int num_kv_heads, float* out);
void attend_heads_avx512(const PagedAttentionParams& p, const float* q, const int32_t* block_table,
                         int first_pos, int num_queries, int first_kv_head, int num_kv_heads,
                         float* out);
// The first position the query at `pos` attends to: pos - sliding_window + 1 with a window
// (never below 0), else 0.
inline int first_visible_position(const PagedAttentionParams& p, int pos) {
  return p.sliding_window > 0 && pos >= p.sliding_window ? pos - p.sliding_window + 1 : 0;
}
// Query tokens per task of paged_attention: a tile shares each block's K/V loads.
constexpr int kAttentionQueryTile = 8;
}  // namespace detail

}  // namespace pagedserve::kernels
