// Tiny random models of every family of issue 15, written as Hugging Face would have them:
// config.json with each family's real keys (the values shrunk so a test runs in milliseconds,
// and chosen so each feature changes the logits: small sliding windows, small RoPE bases and
// original context lengths) and F32 tensors under the real names.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tests/model/family_reference.h"

namespace pagedserve::testing {

struct FamilyShape {
  int hidden = 48;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 12;
  int ffn = 80;
  int vocab = 131;
};

// What each decoder layer's checkpoint holds besides the Llama tensors.
struct LayerTensors {
  bool qkv_bias = false;  // q/k/v_proj.bias (Llama attention_bias, Qwen2)
  bool o_bias = false;    // o_proj.bias (Llama attention_bias only)
  bool mlp_bias = false;  // gate/up/down_proj.bias (Llama mlp_bias)
  bool qk_norm = false;   // self_attn.q_norm / k_norm [head_dim] (Qwen3, Gemma 3)
  bool fused = false;     // Phi-3: self_attn.qkv_proj and mlp.gate_up_proj
  bool gemma = false;     // Gemma: 4 norms per layer, stored as w for (1 + w)
};

inline nlohmann::json base_config(const std::string& architecture, const std::string& model_type,
                                  const FamilyShape& s) {
  return {{"architectures", {architecture}},
          {"model_type", model_type},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.ffn},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"vocab_size", s.vocab},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"max_position_embeddings", 2048},
          {"hidden_act", "silu"},
          {"initializer_range", 0.02},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"use_cache", true},
          {"torch_dtype", "float32"},
          {"transformers_version", "4.51.0"}};
}

// Embeddings, every layer, the final norm, and lm_head unless `tied`.
inline void add_tensors(HfModel& m, const FamilyShape& s, const LayerTensors& t, bool tied,
                        uint32_t seed) {
  HfModelBuilder b(seed);
  const int q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  b.embedding(m, s.vocab, s.hidden, 1.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    b.norm(m, p + "input_layernorm.weight", s.hidden, t.gemma);
    b.norm(m, p + "post_attention_layernorm.weight", s.hidden, t.gemma);
    if (t.gemma) {
      b.norm(m, p + "pre_feedforward_layernorm.weight", s.hidden, true);
      b.norm(m, p + "post_feedforward_layernorm.weight", s.hidden, true);
    }
    if (t.fused) {
      b.matrix(m, p + "self_attn.qkv_proj.weight", q + 2 * kv, s.hidden);
      b.matrix(m, p + "mlp.gate_up_proj.weight", 2 * s.ffn, s.hidden);
    } else {
      b.matrix(m, p + "self_attn.q_proj.weight", q, s.hidden);
      b.matrix(m, p + "self_attn.k_proj.weight", kv, s.hidden);
      b.matrix(m, p + "self_attn.v_proj.weight", kv, s.hidden);
      b.matrix(m, p + "mlp.gate_proj.weight", s.ffn, s.hidden);
      b.matrix(m, p + "mlp.up_proj.weight", s.ffn, s.hidden);
    }
    b.matrix(m, p + "self_attn.o_proj.weight", s.hidden, q);
    b.matrix(m, p + "mlp.down_proj.weight", s.hidden, s.ffn);
    if (t.qkv_bias) {
      b.bias(m, p + "self_attn.q_proj.bias", q);
      b.bias(m, p + "self_attn.k_proj.bias", kv);
      b.bias(m, p + "self_attn.v_proj.bias", kv);
    }
    if (t.o_bias) b.bias(m, p + "self_attn.o_proj.bias", s.hidden);
    if (t.mlp_bias) {
      b.bias(m, p + "mlp.gate_proj.bias", s.ffn);
      b.bias(m, p + "mlp.up_proj.bias", s.ffn);
      b.bias(m, p + "mlp.down_proj.bias", s.hidden);
    }
    if (t.qk_norm) {
      b.norm(m, p + "self_attn.q_norm.weight", s.head_dim, t.gemma);
      b.norm(m, p + "self_attn.k_norm.weight", s.head_dim, t.gemma);
    }
  }
  b.norm(m, "model.norm.weight", s.hidden, t.gemma);
  if (!tied) b.matrix(m, "lm_head.weight", s.vocab, s.hidden);
}

// LlamaForCausalLM; rope_scaling null unless given.
inline HfModel llama_model(uint32_t seed, const nlohmann::json& rope_scaling = nullptr,
                           FamilyShape s = {}) {
  HfModel m;
  m.config = base_config("LlamaForCausalLM", "llama", s);
  m.config["rope_scaling"] = rope_scaling;
  m.config["attention_bias"] = false;
  m.config["mlp_bias"] = false;
  m.config["pretraining_tp"] = 1;
  m.config["tie_word_embeddings"] = false;
  add_tensors(m, s, {}, false, seed);
  return m;
}

// MistralForCausalLM with a sliding window of `window` tokens on every layer.
inline HfModel mistral_model(uint32_t seed, int window) {
  FamilyShape s;
  s.head_dim = 16;  // explicit head_dim != hidden / heads, as Mistral NeMo has
  HfModel m;
  m.config = base_config("MistralForCausalLM", "mistral", s);
  m.config["sliding_window"] = window;
  m.config["tie_word_embeddings"] = false;
  m.config["rope_theta"] = 1000000.0;
  add_tensors(m, s, {}, false, seed);
  return m;
}

// Qwen2ForCausalLM as Qwen2.5 0.5B-3B ship: q/k/v biases, no o bias, tied embeddings, a
// sliding_window value that use_sliding_window=false switches off.
inline HfModel qwen2_model(uint32_t seed) {
  FamilyShape s;
  s.head_dim = s.hidden / s.heads;
  HfModel m;
  m.config = base_config("Qwen2ForCausalLM", "qwen2", s);
  m.config.erase("head_dim");  // Qwen2 configs have none
  m.config["rope_theta"] = 1000000.0;
  m.config["rms_norm_eps"] = 1e-6;
  m.config["tie_word_embeddings"] = true;
  m.config["use_sliding_window"] = false;
  m.config["sliding_window"] = 4;
  m.config["max_window_layers"] = 1;
  add_tensors(m, s, {.qkv_bias = true}, true, seed);
  return m;
}

// Qwen3ForCausalLM: per-head q/k RMSNorm before RoPE, head_dim 16 with hidden 32 and 4 heads.
inline HfModel qwen3_model(uint32_t seed) {
  FamilyShape s{.hidden = 32,
                .layers = 3,
                .heads = 4,
                .kv_heads = 2,
                .head_dim = 16,
                .ffn = 64,
                .vocab = 151};
  HfModel m;
  m.config = base_config("Qwen3ForCausalLM", "qwen3", s);
  m.config["rope_theta"] = 1000000.0;
  m.config["rms_norm_eps"] = 1e-6;
  m.config["attention_bias"] = false;
  m.config["tie_word_embeddings"] = true;
  m.config["use_sliding_window"] = false;
  m.config["sliding_window"] = nullptr;
  m.config["max_window_layers"] = 3;
  m.config["rope_scaling"] = nullptr;
  add_tensors(m, s, {.qk_norm = true}, true, seed);
  return m;
}

// Phi3ForCausalLM with longrope: original_max_position_embeddings at the top level (as the
// Phi-3 configs have it), short/long factors, and a sliding window. With partial_rotary_factor
// 0.75 and tied embeddings it is shaped like Phi-4-mini.
inline HfModel phi3_model(uint32_t seed, int original_max, int window, bool phi4_mini) {
  FamilyShape s;
  if (phi4_mini)
    s = {.hidden = 64,
         .layers = 2,
         .heads = 4,
         .kv_heads = 2,
         .head_dim = 16,
         .ffn = 96,
         .vocab = 200};
  HfModel m;
  m.config = base_config("Phi3ForCausalLM", "phi3", s);
  m.config.erase("head_dim");  // Phi-3 derives it from hidden_size / num_attention_heads
  const int rotary_half = static_cast<int>(s.head_dim * (phi4_mini ? 0.75 : 1.0)) / 2;
  HfModelBuilder b(seed + 1000);
  m.config["rope_scaling"] = {{"type", "longrope"},
                              {"short_factor", b.uniform(rotary_half, 1.0, 1.5)},
                              {"long_factor", b.uniform(rotary_half, 1.5, 6.0)}};
  m.config["original_max_position_embeddings"] = original_max;
  m.config["max_position_embeddings"] = 4 * original_max;
  m.config["sliding_window"] = window;
  m.config["tie_word_embeddings"] = phi4_mini;
  m.config["rope_theta"] = 10000.0;
  if (phi4_mini) m.config["partial_rotary_factor"] = 0.75;
  add_tensors(m, s, {.fused = true}, phi4_mini, seed);
  return m;
}

// Gemma2ForCausalLM: no tie_word_embeddings key (Gemma ties by default), soft-capping and a
// query_pre_attn_scalar different from head_dim; sliding window on layers 0, 2, ...
inline HfModel gemma2_model(uint32_t seed, int window, int hidden = 32) {
  FamilyShape s{.hidden = hidden,
                .layers = 4,
                .heads = 4,
                .kv_heads = 2,
                .head_dim = 16,
                .ffn = 64,
                .vocab = 173};
  HfModel m;
  m.config = base_config("Gemma2ForCausalLM", "gemma2", s);
  m.config["hidden_act"] = "gelu_pytorch_tanh";
  m.config["hidden_activation"] = "gelu_pytorch_tanh";
  m.config["query_pre_attn_scalar"] = 24;
  m.config["attn_logit_softcapping"] = 2.5;   // 50 in Gemma 2; small so that it bends here
  m.config["final_logit_softcapping"] = 4.0;  // 30 in Gemma 2
  m.config["sliding_window"] = window;
  m.config["rms_norm_eps"] = 1e-6;
  m.config["attention_bias"] = false;
  m.config["cache_implementation"] = "hybrid";
  add_tensors(m, s, {.gemma = true}, true, seed);
  return m;
}

// Gemma3ForCausalLM (text): q/k norms, 5 local : 1 global via sliding_window_pattern 6 (or an
// explicit layer_types when given), local RoPE base 10000, linear scaling on global layers.
inline HfModel gemma3_model(uint32_t seed, int window,
                            const nlohmann::json& layer_types = nullptr) {
  FamilyShape s{.hidden = 32,
                .layers = 6,
                .heads = 2,
                .kv_heads = 1,
                .head_dim = 16,
                .ffn = 64,
                .vocab = 167};
  if (layer_types.is_array()) s.layers = static_cast<int>(layer_types.size());
  HfModel m;
  m.config = base_config("Gemma3ForCausalLM", "gemma3_text", s);
  m.config.erase("hidden_act");
  m.config["hidden_activation"] = "gelu_pytorch_tanh";
  m.config["query_pre_attn_scalar"] = 16;
  m.config["attn_logit_softcapping"] = nullptr;
  m.config["final_logit_softcapping"] = nullptr;
  m.config["sliding_window"] = window;
  m.config["sliding_window_pattern"] = 6;
  if (layer_types.is_array()) m.config["layer_types"] = layer_types;
  m.config["rope_theta"] = 1000000.0;
  m.config["rope_local_base_freq"] = 10000.0;
  m.config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  m.config["rms_norm_eps"] = 1e-6;
  m.config["attention_bias"] = false;
  add_tensors(m, s, {.qk_norm = true, .gemma = true}, true, seed);
  return m;
}

// SmolLM3ForCausalLM: every fourth layer without RoPE (no_rope_layers), tied embeddings.
inline HfModel smollm3_model(uint32_t seed) {
  FamilyShape s;
  s.layers = 4;
  s.head_dim = s.hidden / s.heads;
  HfModel m;
  m.config = base_config("SmolLM3ForCausalLM", "smollm3", s);
  m.config.erase("head_dim");
  m.config["no_rope_layers"] = {1, 1, 1, 0};
  m.config["no_rope_layer_interval"] = 4;
  m.config["layer_types"] = {"full_attention", "full_attention", "full_attention",
                             "full_attention"};
  m.config["use_sliding_window"] = false;
  m.config["sliding_window"] = nullptr;
  m.config["max_window_layers"] = 4;
  m.config["rope_theta"] = 50000.0;
  m.config["rope_scaling"] = nullptr;
  m.config["attention_bias"] = false;
  m.config["mlp_bias"] = false;
  m.config["tie_word_embeddings"] = true;
  add_tensors(m, s, {}, true, seed);
  return m;
}

}  // namespace pagedserve::testing
