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

namespace {

kernels::WeightDtype weight_dtype(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return kernels::WeightDtype::kF16;
    case DType::BF16:
      return kernels::WeightDtype::kBF16;
    case DType::F32:
      break;
  }
  return kernels::WeightDtype::kF32;
}

// Packs float32 matrices of equal width stacked by rows (e.g. q, k and v: one matmul).
kernels::PackedWeight pack_stacked(std::initializer_list<const std::vector<float>*> parts,
                                   int cols) {
  if (parts.size() == 1) {  // wo, w_down, the LM head: no temporary copy of the matrix
    const std::vector<float>& only = **parts.begin();
    const int rows = static_cast<int>(only.size() / static_cast<size_t>(cols));
    return kernels::PackedWeight::pack(only.data(), kernels::WeightDtype::kF32, rows, cols);
  }
  std::vector<float> stacked;
  for (const std::vector<float>* part : parts)
    stacked.insert(stacked.end(), part->begin(), part->end());
  const int rows = static_cast<int>(stacked.size() / static_cast<size_t>(cols));
  return kernels::PackedWeight::pack(stacked.data(), kernels::WeightDtype::kF32, rows, cols);
}

// The same from checkpoint views, in their own dtype. Views of different dtypes are widened to
// float32 (a checkpoint mixing dtypes within one layer is legal, if unusual).
kernels::PackedWeight pack_stacked(std::initializer_list<const TensorView*> parts) {
  const TensorView& first = **parts.begin();
  const int cols = static_cast<int>(first.shape[1]);
  bool same_dtype = true;
  int rows = 0;
  for (const TensorView* part : parts) {
    same_dtype = same_dtype && part->dtype == first.dtype;
    rows += static_cast<int>(part->shape[0]);
  }
  if (parts.size() == 1) {
    return kernels::PackedWeight::pack(first.data, weight_dtype(first.dtype), rows, cols);
  }
  if (!same_dtype) {
    std::vector<float> stacked;
    for (const TensorView* part : parts) {
      const std::vector<float> values = to_f32(*part);
      stacked.insert(stacked.end(), values.begin(), values.end());
    }
    return kernels::PackedWeight::pack(stacked.data(), kernels::WeightDtype::kF32, rows, cols);
  }
  std::vector<std::byte> stacked;
  for (const TensorView* part : parts)
    stacked.insert(stacked.end(), part->data, part->data + part->num_bytes);
  return kernels::PackedWeight::pack(stacked.data(), weight_dtype(first.dtype), rows, cols);
}

}  // namespace

LlamaModel::LlamaModel(const LlamaWeights& w, kernels::ThreadPool* pool, kernels::Isa isa)
    : config_(w.config),
      embed_tokens_(w.embed_tokens),
      final_norm_(w.final_norm),
      pool_(pool),
      isa_(isa) {
  const int hidden = config_.hidden_size;
  for (const LlamaLayerWeights& lw : w.layers) {
    Layer& layer = layers_.emplace_back();
    layer.input_norm = lw.input_norm;
    layer.post_norm = lw.post_norm;
    layer.wqkv = pack_stacked({&lw.wq, &lw.wk, &lw.wv}, hidden);
    layer.wo = pack_stacked({&lw.wo}, config_.num_attention_heads * config_.head_dim);
    layer.w_gate_up = pack_stacked({&lw.w_gate, &lw.w_up}, hidden);
    layer.w_down = pack_stacked({&lw.w_down}, config_.intermediate_size);
  }
  lm_head_ = pack_stacked({&w.output_projection()}, hidden);
}

LlamaModel::LlamaModel(const LlamaCheckpoint& checkpoint, kernels::ThreadPool* pool,
                       kernels::Isa isa)
    : config_(checkpoint.config),
      embed_tokens_(to_f32(*checkpoint.embed_tokens)),
      final_norm_(to_f32(*checkpoint.final_norm)),
      pool_(pool),
      isa_(isa) {
  for (const LlamaLayerTensors& t : checkpoint.layers) {
    Layer& layer = layers_.emplace_back();
    layer.input_norm = to_f32(*t.input_norm);
    layer.post_norm = to_f32(*t.post_norm);
    layer.wqkv = pack_stacked({t.wq, t.wk, t.wv});
    layer.wo = pack_stacked({t.wo});
    layer.w_gate_up = pack_stacked({t.w_gate, t.w_up});
    layer.w_down = pack_stacked({t.w_down});
  }
  lm_head_ = pack_stacked({&checkpoint.output_projection()});
}

size_t LlamaModel::weight_bytes_per_step() const {
  size_t bytes = lm_head_.weight_bytes() + final_norm_.size() * sizeof(float);
  for (const Layer& layer : layers_) {
    bytes += layer.wqkv.weight_bytes() + layer.wo.weight_bytes() + layer.w_gate_up.weight_bytes() +
             layer.w_down.weight_bytes() +
             (layer.input_norm.size() + layer.post_norm.size()) * sizeof(float);
  }
  return bytes;
}

std::vector<float> LlamaModel::forward(const ForwardBatch& batch, PagedKvCache& cache) const {
  std::vector<float> logits;
  const size_t size = forward(batch, cache, logits).size();
  logits.resize(size);
  return logits;
}

std::span<const float> LlamaModel::forward(const ForwardBatch& batch, PagedKvCache& cache,
                                           std::vector<float>& logits_buffer) const {
  const ModelConfig& c = config_;
  const int num_tokens = batch.num_tokens();
  const int hidden = c.hidden_size;
  const int head_dim = c.head_dim;
  const int q_width = c.num_attention_heads * head_dim;
  const int kv_width = c.num_key_value_heads * head_dim;
  const int qkv_width = q_width + 2 * kv_width;
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
    std::copy_n(embed_tokens_.begin() + static_cast<size_t>(id) * hidden, hidden,
                x.begin() + static_cast<size_t>(t) * hidden);
  }

  std::vector<float> h(x.size());
  std::vector<float> qkv(static_cast<size_t>(num_tokens) * qkv_width);
  std::vector<float> q(static_cast<size_t>(num_tokens) * q_width);
  std::vector<float> k(static_cast<size_t>(num_tokens) * kv_width);
  std::vector<float> v(static_cast<size_t>(num_tokens) * kv_width);
  std::vector<float> attn(q.size());
  std::vector<float> gate_up(static_cast<size_t>(num_tokens) * 2 * ffn);
  std::vector<float> act(static_cast<size_t>(num_tokens) * ffn);
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

  // The rotary angles depend only on the positions: computed once for every layer.
  std::vector<float> rope_cos_sin(static_cast<size_t>(num_tokens) * head_dim);
  kernels::rope_cos_sin(batch.positions.data(), num_tokens, head_dim, c.rope_theta,
                        rope_cos_sin.data(), pool_);

  if (!layers_.empty()) {
    kernels::rms_norm(x.data(), layers_[0].input_norm.data(), h.data(), num_tokens, hidden,
                      c.rms_norm_eps);
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& w = layers_[l];
    kernels::matmul_packed(h.data(), w.wqkv, qkv.data(), num_tokens, pool_, isa_);
    // Split the stacked projection into the contiguous q, k and v the kernels below expect.
    for (int t = 0; t < num_tokens; ++t) {
      const float* row = qkv.data() + static_cast<size_t>(t) * qkv_width;
      std::copy_n(row, q_width, q.begin() + static_cast<size_t>(t) * q_width);
      std::copy_n(row + q_width, kv_width, k.begin() + static_cast<size_t>(t) * kv_width);
      std::copy_n(row + q_width + kv_width, kv_width,
                  v.begin() + static_cast<size_t>(t) * kv_width);
    }
    kernels::rope_rotate_half_table(q.data(), k.data(), rope_cos_sin.data(), num_tokens,
                                    c.num_attention_heads, c.num_key_value_heads, head_dim, pool_);
    const kernels::KvCacheView layer_cache = cache.layer(l);
    kernels::write_kv(k.data(), v.data(), batch.slot_mapping.data(), num_tokens, layer_cache, isa_);
    attention.key_cache = layer_cache.key;
    attention.value_cache = layer_cache.value;
    attention.kv_dtype = layer_cache.dtype;
    kernels::paged_attention(attention, pool_, isa_);
    kernels::matmul_packed(attn.data(), w.wo, proj.data(), num_tokens, pool_, isa_);
    kernels::add_rms_norm(x.data(), proj.data(), w.post_norm.data(), h.data(), num_tokens, hidden,
                          c.rms_norm_eps);

    kernels::matmul_packed(h.data(), w.w_gate_up, gate_up.data(), num_tokens, pool_, isa_);
    kernels::silu_and_mul_stacked(gate_up.data(), act.data(), num_tokens, ffn, pool_, isa_);
    kernels::matmul_packed(act.data(), w.w_down, proj.data(), num_tokens, pool_, isa_);
    if (l + 1 < c.num_hidden_layers) {
      // The residual add fused with the next layer's input norm.
      kernels::add_rms_norm(x.data(), proj.data(), layers_[l + 1].input_norm.data(), h.data(),
                            num_tokens, hidden, c.rms_norm_eps);
    } else {
      for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    }
  }

  // Only the rows that produce logits go through the final norm and the (large) LM head.
  const int num_out = static_cast<int>(batch.logits_indices.size());
  // A step of prompt chunks that are not a prompt's last samples nothing: no rows to norm.
  if (num_out == 0) return {};
  std::vector<float> selected(static_cast<size_t>(num_out) * hidden);
  for (int r = 0; r < num_out; ++r) {
    std::copy_n(x.begin() + static_cast<size_t>(batch.logits_indices[r]) * hidden, hidden,
                selected.begin() + static_cast<size_t>(r) * hidden);
  }
  kernels::rms_norm(selected.data(), final_norm_.data(), selected.data(), num_out, hidden,
                    c.rms_norm_eps);
  const size_t logits_size = static_cast<size_t>(num_out) * c.vocab_size;
  if (logits_buffer.size() < logits_size) logits_buffer.resize(logits_size);
  kernels::matmul_packed(selected.data(), lm_head_, logits_buffer.data(), num_out, pool_, isa_);
  return std::span<const float>(logits_buffer.data(), logits_size);
}

}  // namespace pagedserve::model
