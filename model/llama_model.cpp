// LlamaModel: embedding -> N x (RMSNorm, attention over the paged cache, RMSNorm, SwiGLU MLP)
// -> final RMSNorm -> LM head, computed in float32 with the CPU kernels.
#include "model/llama_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "kernels/cpu/kernels.h"

namespace pagedserve::model {

void ForwardBatch::add_sequence(const std::vector<int32_t>& new_tokens, int num_computed_tokens,
                                const std::vector<int32_t>& block_table, int block_size,
                                bool want_logits) {
  assert(!new_tokens.empty());
  const int seq_len = num_computed_tokens + static_cast<int>(new_tokens.size());
  assert(static_cast<int64_t>(block_table.size()) * block_size >= seq_len);
  if (query_start_loc.empty()) query_start_loc.push_back(0);

  for (size_t i = 0; i < new_tokens.size(); ++i) {
    const int position = num_computed_tokens + static_cast<int>(i);
    token_ids.push_back(new_tokens[i]);
    positions.push_back(position);
    slot_mapping.push_back(static_cast<int64_t>(block_table[position / block_size]) * block_size +
                           position % block_size);
  }
  query_start_loc.push_back(num_tokens());
  seq_lens.push_back(seq_len);
  if (want_logits) logits_indices.push_back(num_tokens() - 1);

  // Keep block_tables rectangular: widen every row when this sequence needs more columns.
  const int width = static_cast<int>(block_table.size());
  if (width > max_blocks_per_seq) {
    std::vector<int32_t> widened(static_cast<size_t>(num_seqs() - 1) * width, 0);
    for (int s = 0; s + 1 < num_seqs(); ++s) {
      for (int b = 0; b < max_blocks_per_seq; ++b) {
        widened[static_cast<size_t>(s) * width + b] = block_tables[s * max_blocks_per_seq + b];
      }
    }
    block_tables = std::move(widened);
    max_blocks_per_seq = width;
  }
  block_tables.insert(block_tables.end(), block_table.begin(), block_table.end());
  block_tables.resize(static_cast<size_t>(num_seqs()) * max_blocks_per_seq, 0);
}

LlamaModel::LlamaModel(LlamaWeights weights, kernels::ThreadPool* pool)
    : weights_(std::move(weights)), pool_(pool) {}

std::vector<float> LlamaModel::forward(const ForwardBatch& batch, PagedKvCache& cache) const {
  const ModelConfig& c = weights_.config;
  const int num_tokens = batch.num_tokens();
  const int hidden = c.hidden_size;
  const int head_dim = c.head_dim;
  const int q_width = c.num_attention_heads * head_dim;
  const int kv_width = c.num_key_value_heads * head_dim;
  const int ffn = c.intermediate_size;
  if (cache.num_layers() != c.num_hidden_layers) {
    throw std::logic_error("LlamaModel::forward: KV cache has the wrong number of layers");
  }

  std::vector<float> x(static_cast<size_t>(num_tokens) * hidden);
  for (int t = 0; t < num_tokens; ++t) {
    const int32_t id = batch.token_ids[t];
    if (id < 0 || id >= c.vocab_size) {
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary of " +
                              std::to_string(c.vocab_size));
    }
    std::copy_n(weights_.embed_tokens.begin() + static_cast<size_t>(id) * hidden, hidden,
                x.begin() + static_cast<size_t>(t) * hidden);
  }

  std::vector<float> h(x.size());
  std::vector<float> q(static_cast<size_t>(num_tokens) * q_width);
  std::vector<float> k(static_cast<size_t>(num_tokens) * kv_width);
  std::vector<float> v(static_cast<size_t>(num_tokens) * kv_width);
  std::vector<float> attn(q.size());
  std::vector<float> gate(static_cast<size_t>(num_tokens) * ffn);
  std::vector<float> up(gate.size());
  std::vector<float> proj(x.size());

  kernels::PagedAttentionParams attention;
  attention.query = q.data();
  attention.out = attn.data();
  attention.query_start_loc = batch.query_start_loc.data();
  attention.seq_lens = batch.seq_lens.data();
  attention.block_tables = batch.block_tables.data();
  attention.num_seqs = batch.num_seqs();
  attention.max_blocks_per_seq = batch.max_blocks_per_seq;
  attention.num_heads = c.num_attention_heads;
  attention.num_kv_heads = c.num_key_value_heads;
  attention.head_dim = head_dim;
  attention.block_size = cache.block_size();
  attention.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LlamaLayerWeights& w = weights_.layers[l];
    kernels::rms_norm(x.data(), w.input_norm.data(), h.data(), num_tokens, hidden, c.rms_norm_eps);
    kernels::matmul_nt(h.data(), w.wq.data(), q.data(), num_tokens, q_width, hidden, pool_);
    kernels::matmul_nt(h.data(), w.wk.data(), k.data(), num_tokens, kv_width, hidden, pool_);
    kernels::matmul_nt(h.data(), w.wv.data(), v.data(), num_tokens, kv_width, hidden, pool_);
    kernels::rope_rotate_half(q.data(), k.data(), batch.positions.data(), num_tokens,
                              c.num_attention_heads, c.num_key_value_heads, head_dim, c.rope_theta);
    const kernels::KvCacheView layer_cache = cache.layer(l);
    kernels::write_kv(k.data(), v.data(), batch.slot_mapping.data(), num_tokens, layer_cache);
    attention.key_cache = layer_cache.key;
    attention.value_cache = layer_cache.value;
    kernels::paged_attention(attention, pool_);
    kernels::matmul_nt(attn.data(), w.wo.data(), proj.data(), num_tokens, hidden, q_width, pool_);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];

    kernels::rms_norm(x.data(), w.post_norm.data(), h.data(), num_tokens, hidden, c.rms_norm_eps);
    kernels::matmul_nt(h.data(), w.w_gate.data(), gate.data(), num_tokens, ffn, hidden, pool_);
    kernels::matmul_nt(h.data(), w.w_up.data(), up.data(), num_tokens, ffn, hidden, pool_);
    kernels::silu_and_mul(gate.data(), up.data(), gate.data(), static_cast<int64_t>(gate.size()));
    kernels::matmul_nt(gate.data(), w.w_down.data(), proj.data(), num_tokens, hidden, ffn, pool_);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }

  // Only the rows that produce logits go through the final norm and the (large) LM head.
  const int num_out = static_cast<int>(batch.logits_indices.size());
  std::vector<float> selected(static_cast<size_t>(num_out) * hidden);
  for (int r = 0; r < num_out; ++r) {
    std::copy_n(x.begin() + static_cast<size_t>(batch.logits_indices[r]) * hidden, hidden,
                selected.begin() + static_cast<size_t>(r) * hidden);
  }
  kernels::rms_norm(selected.data(), weights_.final_norm.data(), selected.data(), num_out, hidden,
                    c.rms_norm_eps);
  std::vector<float> logits(static_cast<size_t>(num_out) * c.vocab_size);
  kernels::matmul_nt(selected.data(), weights_.output_projection().data(), logits.data(), num_out,
                     c.vocab_size, hidden, pool_);
  return logits;
}

}  // namespace pagedserve::model
