// Test helpers for the model families of issue 15: a tiny random model in Hugging Face layout
// (config.json with the real key names, F32 tensors with the real names) and a naive,
// double-precision reference forward that follows the transformers modeling code
// (modeling_llama/mistral/qwen2/qwen3/phi3/gemma2/gemma3/smollm3.py and modeling_rope_utils.py).
// The reference reads only the config JSON and the tensors the test generated; it shares
// nothing with the engine's loader or kernels. One sequence at a time, contiguous K/V.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/model/loader/loader_test_util.h"

namespace pagedserve::testing {

// How far the engine's float32 logits may be from the double-precision reference, relative to
// the row's largest |logit| (at least 1). Measured worst (2026-12-01): 1.1e-6.
constexpr double kFamilyTolerance = 1e-4;

struct HfTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// config.json plus the tensors of model.safetensors, by their Hugging Face names.
struct HfModel {
  nlohmann::json config;
  std::map<std::string, HfTensor> tensors;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const std::vector<float>& at(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error("test model has no tensor " + name);
    return it->second.values;
  }

  // Writes config.json and model.safetensors with every tensor in `dtype` ("F32", "F16" or
  // "BF16"; 16-bit ones must hold values from rounded_to, which convert exactly).
  void write(const std::filesystem::path& dir, const std::string& dtype = "F32") const {
    model::testing::write_json(dir / "config.json", config);
    std::vector<model::testing::RawTensor> raw;
    for (const auto& [name, t] : tensors) {
      if (dtype == "F32") {
        raw.push_back({name, dtype, t.shape, model::testing::f32_bytes(t.values)});
        continue;
      }
      std::vector<uint16_t> bits;
      for (float v : t.values) bits.push_back(dtype == "BF16" ? bf16_bits(v) : f16_bits(v));
      raw.push_back({name, dtype, t.shape, model::testing::u16_bytes(bits)});
    }
    model::testing::write_safetensors(dir / "model.safetensors", raw);
  }

  // A copy whose tensors hold values representable in `dtype` ("F16" or "BF16", round to
  // nearest even) and whose config says so (torch_dtype), as a 16-bit checkpoint is.
  HfModel rounded_to(const std::string& dtype) const {
    HfModel out = *this;
    out.config["torch_dtype"] = dtype == "BF16" ? "bfloat16" : "float16";
    for (auto& [name, t] : out.tensors) {
      for (float& v : t.values) v = round_to(v, dtype);
    }
    return out;
  }

  static float round_to(float v, const std::string& dtype) {
    if (dtype == "F16") return static_cast<float>(static_cast<_Float16>(v));
    return std::bit_cast<float>(static_cast<uint32_t>(bf16_bits(v)) << 16);
  }

 private:
  static uint16_t bf16_bits(float v) {
    const auto bits = std::bit_cast<uint32_t>(v);
    return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  }
  static uint16_t f16_bits(float v) { return std::bit_cast<uint16_t>(static_cast<_Float16>(v)); }
};

// Seeded random tensors with sizes that keep activations O(1) through a few layers.
class HfModelBuilder {
 public:
  explicit HfModelBuilder(uint32_t seed) : rng_(seed) {}

  void matrix(HfModel& m, const std::string& name, int64_t rows, int64_t cols) {
    add(m, name, {rows, cols}, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  }
  void bias(HfModel& m, const std::string& name, int64_t n) { add(m, name, {n}, 0.0f, 0.2f); }
  // Llama-style norm weights scatter around 1; Gemma stores w with the model applying (1 + w),
  // so its weights scatter around 0.
  void norm(HfModel& m, const std::string& name, int64_t n, bool gemma) {
    add(m, name, {n}, gemma ? 0.0f : 1.0f, 0.15f);
  }
  void embedding(HfModel& m, int64_t vocab, int64_t hidden, float scale) {
    add(m, "model.embed_tokens.weight", {vocab, hidden}, 0.0f, scale);
  }
  std::vector<double> uniform(int n, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> v(n);
    for (double& x : v) x = dist(rng_);
    return v;
  }

 private:
  void add(HfModel& m, const std::string& name, std::vector<int64_t> shape, float mean,
           float scale) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    HfTensor t{std::move(shape), std::vector<float>(static_cast<size_t>(n))};
    for (float& x : t.values) x = mean + scale * normal(rng_);
    m.tensors[name] = std::move(t);
  }
  std::mt19937 rng_;
};

// ---- RoPE inverse frequencies, as transformers' modeling_rope_utils.py computes them ----

// What a layer's rotary embedding is: frequencies over the first rotary_dim dims of a head
// (rotate_half pairing i with i + rotary_dim/2) and the factor cos and sin are multiplied by.
struct RopePlan {
  bool enabled = true;
  std::vector<double> inv_freq;  // [rotary_dim / 2]
  double attention_factor = 1.0;
};

inline std::vector<double> default_inv_freq(double base, int dim) {
  std::vector<double> f(dim / 2);
  for (int i = 0; i < dim / 2; ++i) f[i] = 1.0 / std::pow(base, 2.0 * i / dim);
  return f;
}

// `context_length` is the sequence length of the Hugging Face forward that produced the
// logits (max(position_ids) + 1): dynamic NTK and longrope depend on it.
inline RopePlan rope_plan(const nlohmann::json& cfg, double base, const nlohmann::json& scaling,
                          int dim, int context_length) {
  RopePlan plan;
  plan.inv_freq = default_inv_freq(base, dim);
  if (scaling.is_null()) return plan;
  const std::string type =
      scaling.value("rope_type", scaling.value("type", std::string("default")));
  const double max_pos = cfg.at("max_position_embeddings").get<double>();
  if (type == "default") return plan;
  if (type == "linear") {
    for (double& f : plan.inv_freq) f /= scaling.at("factor").get<double>();
  } else if (type == "dynamic") {
    const double factor = scaling.at("factor").get<double>();
    const double seq_len = std::max<double>(context_length, max_pos);
    const double scaled_base =
        base * std::pow(factor * seq_len / max_pos - (factor - 1.0), dim / (dim - 2.0));
    plan.inv_freq = default_inv_freq(scaled_base, dim);
  } else if (type == "llama3") {
    const double factor = scaling.at("factor").get<double>();
    const double low = scaling.at("low_freq_factor").get<double>();
    const double high = scaling.at("high_freq_factor").get<double>();
    const double old_len = scaling.at("original_max_position_embeddings").get<double>();
    for (double& f : plan.inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > old_len / low) {
        f /= factor;
      } else if (wavelen >= old_len / high) {  // medium band: interpolate
        const double smooth = (old_len / wavelen - low) / (high - low);
        f = (1.0 - smooth) * f / factor + smooth * f;
      }
    }
  } else if (type == "yarn") {
    // The configs here keep max_position_embeddings = factor * original, so the variants of
    // transformers (factor from rope_scaling, or from that ratio) agree.
    const double factor = scaling.at("factor").get<double>();
    const double original = scaling.value("original_max_position_embeddings", max_pos);
    plan.attention_factor = factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
    const double beta_fast = scaling.value("beta_fast", 32.0);
    const double beta_slow = scaling.value("beta_slow", 1.0);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(base));
    };
    const double lo = std::max(std::floor(correction_dim(beta_fast)), 0.0);
    double hi = std::min(std::ceil(correction_dim(beta_slow)), dim - 1.0);
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < dim / 2; ++i) {
      const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      const double f = plan.inv_freq[i];
      plan.inv_freq[i] = f / factor * (1.0 - extrapolation) + f * extrapolation;
    }
  } else if (type == "longrope") {
    // Phi-3 keeps original_max_position_embeddings at the top level of config.json.
    const double original = cfg.contains("original_max_position_embeddings")
                                ? cfg.at("original_max_position_embeddings").get<double>()
                                : max_pos;
    const double factor = max_pos / original;
    plan.attention_factor =
        factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original));
    const auto& ext =
        context_length > original ? scaling.at("long_factor") : scaling.at("short_factor");
    for (int i = 0; i < dim / 2; ++i) plan.inv_freq[i] /= ext.at(i).get<double>();
  } else {
    throw std::runtime_error("reference: rope type " + type);
  }
  return plan;
}

// ---- The reference forward ----

class HfReference {
 public:
  explicit HfReference(const HfModel& m) : m_(m) {
    const auto& c = m.config;
    type_ = c.at("model_type").get<std::string>();
    gemma_ = type_ == "gemma2" || type_ == "gemma3_text";
    hidden_ = c.at("hidden_size");
    layers_ = c.at("num_hidden_layers");
    heads_ = c.at("num_attention_heads");
    kv_heads_ = c.value("num_key_value_heads", heads_);
    head_dim_ = c.contains("head_dim") && !c.at("head_dim").is_null() ? c.at("head_dim").get<int>()
                                                                      : hidden_ / heads_;
    ffn_ = c.at("intermediate_size");
    vocab_ = c.at("vocab_size");
    eps_ = c.value("rms_norm_eps", 1e-6);
    scale_ = gemma_ ? 1.0 / std::sqrt(c.at("query_pre_attn_scalar").get<double>())
                    : 1.0 / std::sqrt(static_cast<double>(head_dim_));
    attn_softcap_ = optional_number(c, "attn_logit_softcapping");
    final_softcap_ = optional_number(c, "final_logit_softcapping");
    const double partial = c.value("partial_rotary_factor", 1.0);
    rotary_dim_ = static_cast<int>(head_dim_ * partial);
    for (int l = 0; l < layers_; ++l) {
      windows_.push_back(layer_is_sliding(l) ? c.at("sliding_window").get<int>() : 0);
    }
    keys_.resize(layers_);
    values_.resize(layers_);
  }

  int window(int layer) const { return windows_[layer]; }

  // Feeds the token at the next position and returns its logits. forward_length is
  // max(position_ids) + 1 of the transformers forward that computes this token (the sequence
  // run alone, chunk by chunk): dynamic NTK and longrope choose their frequencies from it, and
  // keys already cached keep the rotation of the forward that computed them.
  std::vector<double> next(int32_t token, int forward_length) {
    const int pos = position_++;
    const std::vector<RopePlan>& ropes = ropes_for(forward_length);
    const auto& embed = m_.at("model.embed_tokens.weight");
    std::vector<double> x(embed.begin() + static_cast<size_t>(token) * hidden_,
                          embed.begin() + static_cast<size_t>(token + 1) * hidden_);
    if (gemma_) {  // transformers: the normalizer is a tensor of the model's dtype
      double normalizer = std::sqrt(static_cast<double>(hidden_));
      const std::string dtype = m_.config.value("torch_dtype", std::string("float32"));
      if (dtype == "bfloat16")
        normalizer = HfModel::round_to(static_cast<float>(normalizer), "BF16");
      if (dtype == "float16") normalizer = HfModel::round_to(static_cast<float>(normalizer), "F16");
      for (double& v : x) v *= normalizer;
    }
    for (int l = 0; l < layers_; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      auto h = attention(l, p, norm(x, p + "input_layernorm.weight"), pos, ropes[l]);
      if (gemma_) h = norm(h, p + "post_attention_layernorm.weight");
      for (int i = 0; i < hidden_; ++i) x[i] += h[i];
      const std::string mlp_norm =
          gemma_ ? "pre_feedforward_layernorm" : "post_attention_layernorm";
      h = mlp(p, norm(x, p + mlp_norm + ".weight"));
      if (gemma_) h = norm(h, p + "post_feedforward_layernorm.weight");
      for (int i = 0; i < hidden_; ++i) x[i] += h[i];
    }
    const std::string head =
        m_.has("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";
    auto logits = linear(norm(x, "model.norm.weight"), head, vocab_);
    if (final_softcap_ > 0) {
      for (double& v : logits) v = final_softcap_ * std::tanh(v / final_softcap_);
    }
    return logits;
  }

 private:
  static double optional_number(const nlohmann::json& c, const char* key) {
    return c.contains(key) && c.at(key).is_number() ? c.at(key).get<double>() : 0.0;
  }

  // Every layer's RoPE for a forward of `forward_length` tokens.
  const std::vector<RopePlan>& ropes_for(int forward_length) {
    auto found = ropes_.find(forward_length);
    if (found != ropes_.end()) return found->second;
    const auto& c = m_.config;
    const nlohmann::json scaling = c.value("rope_scaling", nlohmann::json());
    std::vector<RopePlan> ropes;
    for (int l = 0; l < layers_; ++l) {
      if (c.contains("rope_parameters")) {  // transformers 5: theta and scaling in one object
        nlohmann::json p = c.at("rope_parameters");
        if (p.contains("full_attention")) {  // Gemma 3: one object per layer type
          p = p.at(windows_[l] > 0 ? "sliding_attention" : "full_attention");
        }
        ropes.push_back(
            rope_plan(c, p.at("rope_theta").get<double>(), p, rotary_dim_, forward_length));
      } else if (type_ == "gemma3_text" && windows_[l] > 0) {  // local: plain RoPE, own base
        ropes.push_back(rope_plan(c, c.value("rope_local_base_freq", 10000.0), nullptr, rotary_dim_,
                                  forward_length));
      } else {
        ropes.push_back(
            rope_plan(c, c.value("rope_theta", 10000.0), scaling, rotary_dim_, forward_length));
      }
      if (type_ == "smollm3" && c.at("no_rope_layers").at(l).get<int>() == 0) {
        ropes.back().enabled = false;
      }
    }
    return ropes_[forward_length] = std::move(ropes);
  }

  // Which layers use the sliding window, as each family's config class decides.
  bool layer_is_sliding(int l) const {
    const auto& c = m_.config;
    const bool has_window = c.contains("sliding_window") && c.at("sliding_window").is_number();
    if (!has_window) return false;
    if (c.contains("layer_types") && c.at("layer_types").is_array()) {
      return c.at("layer_types").at(l).get<std::string>() == "sliding_attention";
    }
    if (type_ == "mistral" || type_ == "phi3") return true;
    if (type_ == "qwen2" || type_ == "qwen3") {
      return c.value("use_sliding_window", false) && l >= c.value("max_window_layers", 0);
    }
    if (type_ == "gemma2") return (l + 1) % 2 != 0;
    if (type_ == "gemma3_text") return (l + 1) % c.value("sliding_window_pattern", 6) != 0;
    if (type_ == "smollm3") {
      return c.value("use_sliding_window", false) && c.at("no_rope_layers").at(l).get<int>() == 0;
    }
    return false;
  }

  std::vector<double> norm(const std::vector<double>& x, const std::string& weight_name) const {
    const auto& w = m_.at(weight_name);
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + eps_);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * (gemma_ ? 1.0 + w[i] : w[i]);
    return out;
  }

  // y = W x (+ b), W [rows, x.size()] starting at row `first_row` of the named tensor.
  std::vector<double> linear(const std::vector<double>& x, const std::string& name, int rows,
                             int first_row = 0) const {
    const auto& w = m_.at(name);
    const size_t cols = x.size();
    std::vector<double> out(rows, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; ++c) out[r] += w[(first_row + r) * cols + c] * x[c];
    }
    const std::string bias = name.substr(0, name.size() - 6) + "bias";  // "...weight" -> "...bias"
    if (m_.has(bias)) {
      for (int r = 0; r < rows; ++r) out[r] += m_.at(bias)[first_row + r];
    }
    return out;
  }

  void rotate(double* v, const RopePlan& rope, int pos) const {
    if (!rope.enabled) return;
    const int half = rotary_dim_ / 2;
    for (int i = 0; i < half; ++i) {
      const double angle = pos * rope.inv_freq[i];
      const double c = std::cos(angle) * rope.attention_factor;
      const double s = std::sin(angle) * rope.attention_factor;
      const double a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }

  // Per-head RMSNorm of q or k (Qwen3: w; Gemma 3: 1 + w), when the checkpoint has one.
  void head_norm(std::vector<double>& v, int num_heads, const std::string& name) const {
    if (!m_.has(name)) return;
    for (int h = 0; h < num_heads; ++h) {
      std::vector<double> one(v.begin() + h * head_dim_, v.begin() + (h + 1) * head_dim_);
      one = norm(one, name);
      std::copy(one.begin(), one.end(), v.begin() + h * head_dim_);
    }
  }

  std::vector<double> attention(int l, const std::string& p, const std::vector<double>& h, int pos,
                                const RopePlan& rope) {
    const int q_size = heads_ * head_dim_, kv_size = kv_heads_ * head_dim_;
    std::vector<double> q, k, v;
    if (m_.has(p + "self_attn.qkv_proj.weight")) {  // Phi-3: q, k, v stacked in one matrix
      q = linear(h, p + "self_attn.qkv_proj.weight", q_size, 0);
      k = linear(h, p + "self_attn.qkv_proj.weight", kv_size, q_size);
      v = linear(h, p + "self_attn.qkv_proj.weight", kv_size, q_size + kv_size);
    } else {
      q = linear(h, p + "self_attn.q_proj.weight", q_size);
      k = linear(h, p + "self_attn.k_proj.weight", kv_size);
      v = linear(h, p + "self_attn.v_proj.weight", kv_size);
    }
    head_norm(q, heads_, p + "self_attn.q_norm.weight");
    head_norm(k, kv_heads_, p + "self_attn.k_norm.weight");
    for (int head = 0; head < heads_; ++head) rotate(&q[head * head_dim_], rope, pos);
    for (int head = 0; head < kv_heads_; ++head) rotate(&k[head * head_dim_], rope, pos);
    keys_[l].push_back(k);
    values_[l].push_back(v);
    // HF's sliding mask: kv_idx > q_idx - sliding_window (the window includes the query).
    const int first = windows_[l] > 0 ? std::max(0, pos - windows_[l] + 1) : 0;
    std::vector<double> out(q_size, 0.0);
    for (int head = 0; head < heads_; ++head) {
      const int kvh = head / (heads_ / kv_heads_);
      std::vector<double> scores;
      double mx = -1e300;
      for (int t = first; t <= pos; ++t) {
        double s = 0;
        for (int d = 0; d < head_dim_; ++d)
          s += q[head * head_dim_ + d] * keys_[l][t][kvh * head_dim_ + d];
        s *= scale_;
        if (attn_softcap_ > 0) s = attn_softcap_ * std::tanh(s / attn_softcap_);
        scores.push_back(s);
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - mx));
      for (int t = first; t <= pos; ++t) {
        for (int d = 0; d < head_dim_; ++d) {
          out[head * head_dim_ + d] += scores[t - first] / sum * values_[l][t][kvh * head_dim_ + d];
        }
      }
    }
    return linear(out, p + "self_attn.o_proj.weight", hidden_);
  }

  std::vector<double> mlp(const std::string& p, const std::vector<double>& h) const {
    std::vector<double> gate, up;
    if (m_.has(p + "mlp.gate_up_proj.weight")) {  // Phi-3: gate rows first, then up
      gate = linear(h, p + "mlp.gate_up_proj.weight", ffn_, 0);
      up = linear(h, p + "mlp.gate_up_proj.weight", ffn_, ffn_);
    } else {
      gate = linear(h, p + "mlp.gate_proj.weight", ffn_);
      up = linear(h, p + "mlp.up_proj.weight", ffn_);
    }
    for (int i = 0; i < ffn_; ++i) {
      const double g = gate[i];
      const double act = gemma_ ? 0.5 * g *
                                      (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) *
                                                       (g + 0.044715 * g * g * g)))
                                : g / (1.0 + std::exp(-g));  // gelu_pytorch_tanh : silu
      gate[i] = act * up[i];
    }
    return linear(gate, p + "mlp.down_proj.weight", hidden_);
  }

  const HfModel& m_;
  std::string type_;
  bool gemma_ = false;
  int hidden_, layers_, heads_, kv_heads_, head_dim_, ffn_, vocab_, rotary_dim_;
  double eps_, scale_, attn_softcap_, final_softcap_;
  std::vector<int> windows_;                    // per layer; 0 = full attention
  std::map<int, std::vector<RopePlan>> ropes_;  // by forward length
  int position_ = 0;
  std::vector<std::vector<std::vector<double>>> keys_, values_;  // [layer][pos][kv_heads*hd]
};

}  // namespace pagedserve::testing
