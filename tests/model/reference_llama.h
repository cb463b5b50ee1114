// An independent, deliberately naive Llama forward pass for tests: one sequence at a time,
// contiguous K/V kept in plain vectors, double-precision accumulation, no kernels from
// kernels/ and no paging. The paged, batched LlamaModel must agree with it. With a 16-bit KV
// dtype it rounds every key and value it stores to float16 (the compiler's _Float16) or
// bfloat16 (8 significant bits, nearest even, in double), as a 16-bit KV cache does.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "model/loader/llama_weights.h"

namespace pagedserve::testing {

// What the reference's KV cache keeps: exact doubles, or the float32 K/V rounded to a 16-bit
// type, or quantized to int8 per (token, KV head) row (kInt8: q = round-half-even(x / s) with
// s = amax / 127 over the row's head_dim values, written in double here).
enum class ReferenceKv { kFloat64, kFloat16, kBFloat16, kInt8 };

class ReferenceLlama {
 public:
  explicit ReferenceLlama(const model::LlamaWeights& w, ReferenceKv kv = ReferenceKv::kFloat64)
      : w_(w), kv_(kv) {
    keys_.resize(w.config.num_hidden_layers);
    values_.resize(w.config.num_hidden_layers);
  }

  // Feeds one token at the next position and returns its logits.
  std::vector<float> next(int32_t token) {
    const auto& c = w_.config;
    const int hidden = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads;
    const int nkv = c.num_key_value_heads, ffn = c.intermediate_size;
    const int pos = position_++;
    std::vector<double> x(w_.embed_tokens.begin() + static_cast<size_t>(token) * hidden,
                          w_.embed_tokens.begin() + static_cast<size_t>(token + 1) * hidden);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const auto& L = w_.layers[l];
      auto h = norm(x, L.input_norm);
      auto q = linear(h, L.wq, nh * hd);
      auto k = linear(h, L.wk, nkv * hd);
      auto v = linear(h, L.wv, nkv * hd);
      for (int head = 0; head < nh; ++head) rotate(&q[head * hd], pos);
      for (int head = 0; head < nkv; ++head) rotate(&k[head * hd], pos);
      keys_[l].push_back(stored(k));
      values_[l].push_back(stored(v));
      std::vector<double> attn(nh * hd, 0.0);
      for (int head = 0; head < nh; ++head) {
        const int kvh = head / (nh / nkv);
        std::vector<double> scores(pos + 1);
        double mx = -1e300;
        for (int t = 0; t <= pos; ++t) {
          double s = 0;
          for (int d = 0; d < hd; ++d) s += q[head * hd + d] * keys_[l][t][kvh * hd + d];
          scores[t] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, scores[t]);
        }
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - mx));
        for (int t = 0; t <= pos; ++t) {
          for (int d = 0; d < hd; ++d) {
            attn[head * hd + d] += scores[t] / sum * values_[l][t][kvh * hd + d];
          }
        }
      }
      auto o = linear(attn, L.wo, hidden);
      for (int i = 0; i < hidden; ++i) x[i] += o[i];
      h = norm(x, L.post_norm);
      auto g = linear(h, L.w_gate, ffn);
      auto u = linear(h, L.w_up, ffn);
      for (int i = 0; i < ffn; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto d = linear(g, L.w_down, hidden);
      for (int i = 0; i < hidden; ++i) x[i] += d[i];
    }
    auto out = linear(norm(x, w_.final_norm), w_.output_projection(), c.vocab_size);
    return std::vector<float>(out.begin(), out.end());
  }

 private:
  std::vector<double> norm(const std::vector<double>& x, const std::vector<float>& weight) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + w_.config.rms_norm_eps);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * weight[i];
    return out;
  }
  static std::vector<double> linear(const std::vector<double>& x, const std::vector<float>& w,
                                    int rows) {
    const size_t cols = x.size();
    std::vector<double> out(rows, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; ++c) out[r] += w[r * cols + c] * x[c];
    }
    return out;
  }
  void rotate(double* v, int pos) const {
    const int half = w_.config.head_dim / 2;
    for (int i = 0; i < half; ++i) {
      const double angle =
          pos * std::pow(static_cast<double>(w_.config.rope_theta), -2.0 * i / w_.config.head_dim);
      const double a = v[i], b = v[i + half];
      v[i] = a * std::cos(angle) - b * std::sin(angle);
      v[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }

  // What the KV cache keeps of x: the float32 the model computes, rounded to the KV dtype.
  std::vector<double> stored(std::vector<double> x) const {
    if (kv_ == ReferenceKv::kFloat64) return x;
    if (kv_ == ReferenceKv::kInt8) {
      const size_t hd = static_cast<size_t>(w_.config.head_dim);
      for (size_t row = 0; row < x.size(); row += hd) {
        double amax = 0;
        for (size_t i = row; i < row + hd; ++i) {
          amax = std::max(amax, std::abs(static_cast<double>(static_cast<float>(x[i]))));
        }
        const double scale = amax / 127.0;
        for (size_t i = row; i < row + hd; ++i) {
          const double f = static_cast<double>(static_cast<float>(x[i]));
          x[i] = scale == 0.0 ? 0.0 : std::nearbyint(f / scale) * scale;
        }
      }
      return x;
    }
    for (double& v : x) {
      const float f = static_cast<float>(v);
      if (kv_ == ReferenceKv::kFloat16) {
        v = static_cast<double>(static_cast<_Float16>(f));
      } else if (f != 0.0f && std::isfinite(f)) {
        int exponent = 0;
        const double mantissa = std::frexp(static_cast<double>(f), &exponent);  // [0.5, 1)
        v = std::ldexp(std::nearbyint(std::ldexp(mantissa, 8)), exponent - 8);
      }
    }
    return x;
  }

  const model::LlamaWeights& w_;
  ReferenceKv kv_;
  int position_ = 0;
  std::vector<std::vector<std::vector<double>>> keys_, values_;  // [layer][pos][kv_heads*hd]
};

// A random Llama with the given shape, built in memory (no files).
inline model::LlamaWeights random_llama(int hidden, int layers, int heads, int kv_heads,
                                        int head_dim, int ffn, int vocab, bool tied,
                                        uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng) * scale;
    return v;
  };
  auto ones_ish = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = 1.0f + 0.1f * normal(rng);
    return v;
  };
  model::LlamaWeights w;
  auto& c = w.config;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = hidden;
  c.intermediate_size = ffn;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.vocab_size = vocab;
  c.tie_word_embeddings = tied;
  c.max_position_embeddings = 1024;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(hidden));
  w.embed_tokens = fill(static_cast<size_t>(vocab) * hidden, 1.0f);
  for (int l = 0; l < layers; ++l) {
    model::LlamaLayerWeights L;
    L.input_norm = ones_ish(hidden);
    L.wq = fill(static_cast<size_t>(heads) * head_dim * hidden, s_in);
    L.wk = fill(static_cast<size_t>(kv_heads) * head_dim * hidden, s_in);
    L.wv = fill(static_cast<size_t>(kv_heads) * head_dim * hidden, s_in);
    L.wo = fill(static_cast<size_t>(hidden) * heads * head_dim,
                1.0f / std::sqrt(static_cast<float>(heads * head_dim)));
    L.post_norm = ones_ish(hidden);
    L.w_gate = fill(static_cast<size_t>(ffn) * hidden, s_in);
    L.w_up = fill(static_cast<size_t>(ffn) * hidden, s_in);
    L.w_down = fill(static_cast<size_t>(hidden) * ffn, 1.0f / std::sqrt(static_cast<float>(ffn)));
    w.layers.push_back(std::move(L));
  }
  w.final_norm = ones_ish(hidden);
  if (!tied) w.lm_head = fill(static_cast<size_t>(vocab) * hidden, s_in);
  return w;
}

}  // namespace pagedserve::testing
