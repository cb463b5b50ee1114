// LlamaModel: embedding -> N x (RMSNorm, attention over the paged cache, RMSNorm, SwiGLU MLP)
// -> final RMSNorm -> LM head, computed in float32 with the CPU kernels.
#include "model/llama_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cpu/kernels.h"

namespace pagedserve::model {

void ForwardBatch::add_sequence(const std::vector<int32_t>& new_tokens, int num_computed_tokens,
                                const std::vector<int32_t>& block_table, int block_size,
                                int num_logits) {
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
  assert(num_logits >= 0 && num_logits <= static_cast<int>(new_tokens.size()));
  for (int i = num_logits; i > 0; --i) logits_indices.push_back(num_tokens() - i);

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

// Packs float32 matrices of equal width stacked by rows (e.g. q, k and v: one matmul).
LinearWeight pack_stacked(std::initializer_list<const std::vector<float>*> parts, int cols) {
  if (parts.size() == 1) {  // wo, w_down, the LM head: no temporary copy of the matrix
    const std::vector<float>& only = **parts.begin();
    const int rows = static_cast<int>(only.size() / static_cast<size_t>(cols));
    return LinearWeight(
        kernels::PackedWeight::pack(only.data(), kernels::WeightDtype::kF32, rows, cols));
  }
  std::vector<float> stacked;
  for (const std::vector<float>* part : parts)
    stacked.insert(stacked.end(), part->begin(), part->end());
  const int rows = static_cast<int>(stacked.size() / static_cast<size_t>(cols));
  return LinearWeight(
      kernels::PackedWeight::pack(stacked.data(), kernels::WeightDtype::kF32, rows, cols));
}

// The LM head's format under online quantization: llama.cpp's Q4_K_M keeps it in Q6_K, the
// 8-bit types keep their own (it is the largest matrix, and the logits' accuracy shows most).
WeightFormat lm_head_format(const WeightFormat& format) {
  if (!format.quantization) return format;
  using kernels::QuantType;
  const QuantType wanted = *format.quantization;
  return {wanted == QuantType::kQ8_0 || wanted == QuantType::kQ6_K ? wanted : QuantType::kQ6_K};
}

}  // namespace

LlamaModel::LlamaModel(const LlamaWeights& w, kernels::ThreadPool* pool, kernels::Isa isa)
    : config_(w.config),
      embed_tokens_(w.embed_tokens, w.config.hidden_size),
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
    layer.settings = config_.layer_config(layers_.size() - 1);
  }
  lm_head_ = pack_stacked({&w.output_projection()}, hidden);
  init_rope();
}

LlamaModel::LlamaModel(const LlamaCheckpoint& checkpoint, kernels::ThreadPool* pool,
                       kernels::Isa isa, const WeightFormat& format)
    : config_(checkpoint.config), pool_(pool), isa_(isa) {
  const float offset = config_.norm_weight_offset;
  embed_tokens_ = EmbeddingTable::from_view(*checkpoint.embed_tokens);
  final_norm_ = checkpoint_norm_f32(checkpoint.final_norm, offset);
  for (const LlamaLayerTensors& t : checkpoint.layers) {
    Layer& layer = layers_.emplace_back();
    layer.input_norm = checkpoint_norm_f32(t.input_norm, offset);
    layer.post_norm = checkpoint_norm_f32(t.post_norm, offset);
    layer.post_attention_norm = checkpoint_norm_f32(t.post_attention_norm, offset);
    layer.post_mlp_norm = checkpoint_norm_f32(t.post_mlp_norm, offset);
    layer.q_norm = checkpoint_norm_f32(t.q_norm, offset);
    layer.k_norm = checkpoint_norm_f32(t.k_norm, offset);
    layer.qkv_bias = stacked_f32({t.q_bias, t.k_bias, t.v_bias});
    layer.o_bias = stacked_f32({t.o_bias});
    layer.gate_up_bias = stacked_f32({t.gate_bias, t.up_bias});
    layer.down_bias = stacked_f32({t.down_bias});
    layer.wqkv = t.wqkv ? LinearWeight::from_views({t.wqkv}, format)
                        : LinearWeight::from_views({t.wq, t.wk, t.wv}, format);
    layer.wo = LinearWeight::from_views({t.wo}, format);
    layer.w_gate_up = t.w_gate_up ? LinearWeight::from_views({t.w_gate_up}, format)
                                  : LinearWeight::from_views({t.w_gate, t.w_up}, format);
    layer.w_down = LinearWeight::from_views({t.w_down}, format);
    layer.settings = config_.layer_config(layers_.size() - 1);
  }
  lm_head_ = LinearWeight::from_views({&checkpoint.output_projection()}, lm_head_format(format));
  init_rope();
}

void LlamaModel::init_rope() {
  global_rope_ = rope_frequencies(config_, false);
  local_rope_ = rope_frequencies(config_, true);
  for (const Layer& layer : layers_) {
    if (!layer.settings.use_rope) continue;
    (layer.settings.local_rope ? uses_local_rope_ : uses_global_rope_) = true;
  }
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

std::string LlamaModel::weight_format_summary() const {
  std::vector<std::string> layer_types;
  for (const Layer& layer : layers_) {
    for (const LinearWeight* w : {&layer.wqkv, &layer.wo, &layer.w_gate_up, &layer.w_down}) {
      for (const std::string& type : w->format_names()) {
        if (std::find(layer_types.begin(), layer_types.end(), type) == layer_types.end()) {
          layer_types.push_back(type);
        }
      }
    }
  }
  const auto join = [](const std::vector<std::string>& names) {
    std::string joined;
    for (const std::string& name : names) joined += (joined.empty() ? "" : "+") + name;
    return joined;
  };
  return "layers " + join(layer_types) + ", LM head " + join(lm_head_.format_names());
}

std::vector<float> LlamaModel::forward(const ForwardBatch& batch, PagedKvCache& cache) const {
  Workspace workspace;
  const std::span<const float> logits = forward(batch, cache, workspace);
  return std::vector<float>(logits.begin(), logits.end());
}

struct LlamaModel::Scratch {
  int num_tokens = 0;
  std::vector<float> x;    // the residual stream [tokens, hidden]
  std::vector<float> h;    // normed input of the next block [tokens, hidden]
  std::vector<float> qkv;  // [tokens, q + 2 kv]
  std::vector<float> q, k, v, attn;
  std::vector<float> gate_up, act;
  std::vector<float> proj;         // a block's output [tokens, hidden]
  std::vector<float> rope_global;  // [tokens, rotary_dim]
  std::vector<float> rope_local;   // [tokens, rotary_dim], Gemma 3's local layers
  std::vector<float> selected;     // the rows that produce logits [rows, hidden]
  kernels::PagedAttentionParams attention;

  // The bytes the buffers hold on to.
  size_t capacity_bytes() const {
    size_t floats = 0;
    for (const std::vector<float>* v : {&x, &h, &qkv, &q, &k, &v, &attn, &gate_up, &act, &proj,
                                        &rope_global, &rope_local, &selected}) {
      floats += v->capacity();
    }
    return floats * sizeof(float);
  }
};

LlamaModel::Workspace::Workspace() = default;
LlamaModel::Workspace::~Workspace() = default;
LlamaModel::Workspace::Workspace(Workspace&&) noexcept = default;
LlamaModel::Workspace& LlamaModel::Workspace::operator=(Workspace&&) noexcept = default;

void LlamaModel::embed(const ForwardBatch& batch, Scratch& s) const {
  const ModelConfig& c = config_;
  const int hidden = c.hidden_size;
  for (int t = 0; t < s.num_tokens; ++t) {
    const int32_t id = batch.token_ids[t];
    if (id < 0 || id >= c.vocab_size) {
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary of " +
                              std::to_string(c.vocab_size));
    }
    float* row = s.x.data() + static_cast<size_t>(t) * hidden;
    embed_tokens_.row(id, row);
    if (c.embedding_multiplier != 1.0f) {
      for (int i = 0; i < hidden; ++i) row[i] *= c.embedding_multiplier;
    }
  }
}

// The rotary angles depend only on the positions (and, for LongRoPE, on each sequence's
// length): computed once for every layer.
void LlamaModel::fill_rope_tables(const ForwardBatch& batch, Scratch& s) const {
  const ModelConfig& c = config_;
  const int rotary = c.rope_dims();
  const auto fill = [&](const RopeFrequencies& f, std::vector<float>& table) {
    table.assign(static_cast<size_t>(s.num_tokens) * rotary, 0.0f);
    if (f.plain) {
      kernels::rope_cos_sin(batch.positions.data(), s.num_tokens, rotary, c.rope_theta,
                            table.data(), pool_);
      return;
    }
    std::vector<const float*> per_token;
    if (!f.inv_freq_long.empty()) {
      per_token.resize(static_cast<size_t>(s.num_tokens));
      for (int q = 0; q < batch.num_seqs(); ++q) {
        const float* chosen =
            batch.seq_lens[q] > f.long_after ? f.inv_freq_long.data() : f.inv_freq.data();
        for (int t = batch.query_start_loc[q]; t < batch.query_start_loc[q + 1]; ++t) {
          per_token[t] = chosen;
        }
      }
    }
    kernels::rope_cos_sin_inv_freq(batch.positions.data(), s.num_tokens, rotary, f.inv_freq.data(),
                                   per_token.empty() ? nullptr : per_token.data(),
                                   f.attention_factor, table.data(), pool_);
  };
  if (uses_global_rope_) fill(global_rope_, s.rope_global);
  if (uses_local_rope_) fill(local_rope_, s.rope_local);
}

void LlamaModel::attention_block(int l, const ForwardBatch& batch, PagedKvCache& cache,
                                 Scratch& s) const {
  const ModelConfig& c = config_;
  const Layer& w = layers_[l];
  const int n = s.num_tokens;
  const int head_dim = c.head_dim;
  const int q_width = c.num_attention_heads * head_dim;
  const int kv_width = c.num_key_value_heads * head_dim;
  const int qkv_width = q_width + 2 * kv_width;
  w.wqkv.forward(s.h.data(), s.qkv.data(), n, pool_, isa_);
  if (!w.qkv_bias.empty()) kernels::add_bias(s.qkv.data(), w.qkv_bias.data(), n, qkv_width);
  // Split the stacked projection into the contiguous q, k and v the kernels below expect.
  for (int t = 0; t < n; ++t) {
    const float* row = s.qkv.data() + static_cast<size_t>(t) * qkv_width;
    std::copy_n(row, q_width, s.q.begin() + static_cast<size_t>(t) * q_width);
    std::copy_n(row + q_width, kv_width, s.k.begin() + static_cast<size_t>(t) * kv_width);
    std::copy_n(row + q_width + kv_width, kv_width,
                s.v.begin() + static_cast<size_t>(t) * kv_width);
  }
  if (!w.q_norm.empty()) {
    kernels::rms_norm_heads(s.q.data(), w.q_norm.data(), n, c.num_attention_heads, head_dim,
                            c.rms_norm_eps);
    kernels::rms_norm_heads(s.k.data(), w.k_norm.data(), n, c.num_key_value_heads, head_dim,
                            c.rms_norm_eps);
  }
  if (w.settings.use_rope) {
    const std::vector<float>& table = w.settings.local_rope ? s.rope_local : s.rope_global;
    if (c.rope_dims() == head_dim) {
      kernels::rope_rotate_half_table(s.q.data(), s.k.data(), table.data(), n,
                                      c.num_attention_heads, c.num_key_value_heads, head_dim,
                                      pool_);
    } else {
      kernels::rope_rotate_half_partial(s.q.data(), s.k.data(), table.data(), n,
                                        c.num_attention_heads, c.num_key_value_heads, head_dim,
                                        c.rope_dims(), pool_);
    }
  }
  const kernels::KvCacheView layer_cache = cache.layer(l);
  kernels::write_kv(s.k.data(), s.v.data(), batch.slot_mapping.data(), n, layer_cache, isa_);
  s.attention.key_cache = layer_cache.key;
  s.attention.value_cache = layer_cache.value;
  s.attention.kv_dtype = layer_cache.dtype;
  s.attention.key_scales = layer_cache.key_scales;
  s.attention.value_scales = layer_cache.value_scales;
  s.attention.sliding_window = w.settings.sliding_window;
  kernels::paged_attention(s.attention, pool_, isa_);
  w.wo.forward(s.attn.data(), s.proj.data(), n, pool_, isa_);
  if (!w.o_bias.empty()) kernels::add_bias(s.proj.data(), w.o_bias.data(), n, c.hidden_size);
  if (!w.post_attention_norm.empty()) {
    kernels::rms_norm(s.proj.data(), w.post_attention_norm.data(), s.proj.data(), n, c.hidden_size,
                      c.rms_norm_eps);
  }
  kernels::add_rms_norm(s.x.data(), s.proj.data(), w.post_norm.data(), s.h.data(), n, c.hidden_size,
                        c.rms_norm_eps);
}

void LlamaModel::mlp_block(int l, Scratch& s) const {
  const ModelConfig& c = config_;
  const Layer& w = layers_[l];
  const int n = s.num_tokens;
  const int ffn = c.intermediate_size;
  w.w_gate_up.forward(s.h.data(), s.gate_up.data(), n, pool_, isa_);
  if (!w.gate_up_bias.empty()) {
    // gate_up holds [gate | up] per row, as the bias does.
    kernels::add_bias(s.gate_up.data(), w.gate_up_bias.data(), n, 2 * ffn);
  }
  if (c.activation == Activation::kGeluTanh) {
    kernels::gelu_tanh_and_mul_stacked(s.gate_up.data(), s.act.data(), n, ffn, pool_, isa_);
  } else {
    kernels::silu_and_mul_stacked(s.gate_up.data(), s.act.data(), n, ffn, pool_, isa_);
  }
  w.w_down.forward(s.act.data(), s.proj.data(), n, pool_, isa_);
  if (!w.down_bias.empty()) kernels::add_bias(s.proj.data(), w.down_bias.data(), n, c.hidden_size);
  if (!w.post_mlp_norm.empty()) {
    kernels::rms_norm(s.proj.data(), w.post_mlp_norm.data(), s.proj.data(), n, c.hidden_size,
                      c.rms_norm_eps);
  }
  if (l + 1 < c.num_hidden_layers) {
    // The residual add fused with the next layer's input norm.
    kernels::add_rms_norm(s.x.data(), s.proj.data(), layers_[l + 1].input_norm.data(), s.h.data(),
                          n, c.hidden_size, c.rms_norm_eps);
  } else {
    for (size_t i = 0; i < s.x.size(); ++i) s.x[i] += s.proj[i];
  }
}

std::span<const float> LlamaModel::forward(const ForwardBatch& batch, PagedKvCache& cache,
                                           Workspace& workspace) const {
  const ModelConfig& c = config_;
  const int num_tokens = batch.num_tokens();
  const int hidden = c.hidden_size;
  const int q_width = c.num_attention_heads * c.head_dim;
  const int kv_width = c.num_key_value_heads * c.head_dim;
  const int ffn = c.intermediate_size;
  if (cache.num_layers() != c.num_hidden_layers) {
    throw std::logic_error("LlamaModel::forward: KV cache has the wrong number of layers");
  }

  if (!workspace.scratch_) workspace.scratch_ = std::make_unique<Scratch>();
  Scratch& s = *workspace.scratch_;
  s.num_tokens = num_tokens;
  const auto tokens = static_cast<size_t>(num_tokens);
  // Zeroed as fresh vectors would be (every element is written before it is read, but the
  // zeroing keeps each pass independent of the last for a few tens of microseconds), in the
  // memory the last pass used: no page faults.
  s.x.assign(tokens * hidden, 0.0f);
  s.h.assign(tokens * hidden, 0.0f);
  s.qkv.assign(tokens * (q_width + 2 * kv_width), 0.0f);
  s.q.assign(tokens * q_width, 0.0f);
  s.k.assign(tokens * kv_width, 0.0f);
  s.v.assign(tokens * kv_width, 0.0f);
  s.attn.assign(tokens * q_width, 0.0f);
  s.gate_up.assign(tokens * 2 * ffn, 0.0f);
  s.act.assign(tokens * ffn, 0.0f);
  s.proj.assign(tokens * hidden, 0.0f);
  embed(batch, s);
  fill_rope_tables(batch, s);

  kernels::PagedAttentionParams& attention = s.attention;
  attention.query = s.q.data();
  attention.out = s.attn.data();
  attention.query_start_loc = batch.query_start_loc.data();
  attention.seq_lens = batch.seq_lens.data();
  attention.block_tables = batch.block_tables.data();
  attention.num_seqs = batch.num_seqs();
  attention.max_blocks_per_seq = batch.max_blocks_per_seq;
  attention.num_heads = c.num_attention_heads;
  attention.num_kv_heads = c.num_key_value_heads;
  attention.head_dim = c.head_dim;
  attention.block_size = cache.block_size();
  attention.scale = c.softmax_scale();
  attention.logit_softcap = c.attn_logit_softcap;

  if (!layers_.empty()) {
    kernels::rms_norm(s.x.data(), layers_[0].input_norm.data(), s.h.data(), num_tokens, hidden,
                      c.rms_norm_eps);
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    attention_block(l, batch, cache, s);
    mlp_block(l, s);
  }

  // Only the rows that produce logits go through the final norm and the (large) LM head.
  const int num_out = static_cast<int>(batch.logits_indices.size());
  // A step of prompt chunks that are not a prompt's last samples nothing: no rows to norm.
  if (num_out == 0) {
    workspace.chunk_width_ = 0;
    release_if_large(workspace);
    return {};
  }
  std::vector<float>& selected = s.selected;
  selected.assign(static_cast<size_t>(num_out) * hidden, 0.0f);
  for (int r = 0; r < num_out; ++r) {
    std::copy_n(s.x.begin() + static_cast<size_t>(batch.logits_indices[r]) * hidden, hidden,
                selected.begin() + static_cast<size_t>(r) * hidden);
  }
  kernels::rms_norm(selected.data(), final_norm_.data(), selected.data(), num_out, hidden,
                    c.rms_norm_eps);
  const size_t logits_size = static_cast<size_t>(num_out) * c.vocab_size;
  std::vector<float>& logits = workspace.logits_;
  if (logits.size() < logits_size) logits.resize(logits_size);
  // Each row's chunk maxima, taken as the LM head writes it; not under a soft cap, which
  // changes the values after.
  const int64_t width = lm_head_.chunk_width();
  const int64_t chunks_per_row = width > 0 ? (lm_head_.rows() + width - 1) / width : 0;
  const bool gather = batch.gather_chunk_maxima && c.final_logit_softcap <= 0.0f && width > 0;
  std::vector<float>& chunk_max = workspace.logit_chunk_max_;
  if (gather && chunk_max.size() < static_cast<size_t>(num_out * chunks_per_row)) {
    chunk_max.resize(static_cast<size_t>(num_out * chunks_per_row));
  }
  lm_head_.forward(selected.data(), logits.data(), num_out, pool_, isa_,
                   gather ? chunk_max.data() : nullptr);
  workspace.chunk_width_ = gather ? width : 0;
  workspace.chunks_per_row_ = chunks_per_row;
  if (c.final_logit_softcap > 0.0f) {
    kernels::soft_cap(logits.data(), static_cast<int64_t>(logits_size), c.final_logit_softcap,
                      pool_, isa_);
  }
  release_if_large(workspace);
  return std::span<const float>(logits.data(), logits_size);
}

void LlamaModel::release_if_large(Workspace& workspace) {
  if (workspace.scratch_ && workspace.scratch_->capacity_bytes() > Workspace::kMaxKeptBytes) {
    workspace.scratch_.reset();
  }
}

}  // namespace pagedserve::model
