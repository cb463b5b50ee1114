// GGUF files against the Hugging Face folders they were converted from:
// - make-model's GGUF holds what llama.cpp's convert_hf_to_gguf.py writes for the folder of
//   the same spec, checked tensor by tensor against the folder's safetensors with the test's
//   own transcription of the converter (gguf-py's tensor names, LlamaModel.permute as
//   reshape(n_head, 2, d/2, cols).swapaxes(1, 2), Gemma norms + 1, 1-D tensors F32), the
//   generated rope tensors and longrope keys recomputed from config.json, and the tokenizer
//   metadata against tokenizer.json;
// - stories260K.gguf (converted by llama.cpp) against its Hugging Face folder: same logits and
//   the same greedy continuation of "Once upon a time".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/llama_model.h"
#include "model/loader/gguf.h"
#include "model/loader/llama_weights.h"
#include "model/loader/safetensors.h"
#include "model/synthetic_model.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/model/family_models.h"
#include "tests/model/gguf_family_util.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

using namespace gguf_family;

// ---- The GGUF file against convert_hf_to_gguf.py, transcribed here ----

// gguf-py's tensor_mapping for the names the families use; Gemma's post_attention_layernorm
// is its own norm (ATTN_POST_NORM), elsewhere it is the pre-MLP norm (FFN_NORM).
std::string llama_cpp_name(const std::string& hf, bool gemma) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  const size_t last = rest.rfind('.');
  const std::string module = rest.substr(0, last), suffix = rest.substr(last);
  const std::map<std::string, std::string> names = {
      {"input_layernorm", "attn_norm"},
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.qkv_proj", "attn_qkv"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"post_attention_layernorm", gemma ? "post_attention_norm" : "ffn_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.gate_up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  return "blk." + layer + "." + names.at(module) + suffix;
}

// LlamaModel.permute: weights.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2)
// .reshape(rows, cols), walked in the order of the swapped array.
std::vector<float> converter_permute(const std::vector<float>& w, int64_t rows, int n_head) {
  const int64_t cols = static_cast<int64_t>(w.size()) / rows;
  const int64_t half = rows / n_head / 2;
  std::vector<float> out;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t k = 0; k < half; ++k) {
      for (int64_t j = 0; j < 2; ++j) {  // after swapaxes the pair index is innermost
        const int64_t row = (h * 2 + j) * half + k;
        out.insert(out.end(), w.begin() + row * cols, w.begin() + (row + 1) * cols);
      }
    }
  }
  return out;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_converted_tensors(const SyntheticModelSpec& spec) {
  SCOPED_TRACE(std::string("--arch ") + synthetic_family_name(spec.family) + " dtype " +
               dtype_name(spec.dtype));
  const auto both = write_both(spec);
  const nlohmann::json config = read_json(both->hf / "config.json");
  const std::string type = config.at("model_type");
  const bool gemma = type.starts_with("gemma");
  const bool llama_arch = type == "llama" || type == "mistral" || type == "smollm3";
  const auto st = SafetensorsFile::open(both->hf / "model.safetensors");
  const auto gguf = GgufFile::open(both->gguf);
  const int heads = config.at("num_attention_heads"), kv_heads = config.at("num_key_value_heads");
  size_t checked = 0;
  for (const auto& [hf_name, view] : st->tensors()) {
    const std::string name = llama_cpp_name(hf_name, gemma);
    const GgufTensor* tensor = gguf->find_tensor(name);
    ASSERT_NE(tensor, nullptr) << hf_name << " -> " << name;
    EXPECT_EQ(tensor->shape(), view.shape) << name;
    std::vector<float> want = to_f32(view);
    const bool one_dim = view.shape.size() == 1;
    if (gemma && hf_name.ends_with("norm.weight")) {
      for (float& v : want) v += 1.0f;
    }
    if (llama_arch && hf_name.ends_with("q_proj.weight")) {
      want = converter_permute(want, view.shape[0], heads);
    }
    if (llama_arch && hf_name.ends_with("k_proj.weight")) {
      want = converter_permute(want, view.shape[0], kv_heads);
    }
    const TensorView got = gguf->view(*tensor);
    EXPECT_EQ(got.dtype, one_dim ? DType::F32 : view.dtype) << name;
    EXPECT_EQ(to_f32(got), want) << name;
    ++checked;
  }
  size_t generated = 0;
  if (gguf->find_tensor("rope_freqs.weight")) ++generated;
  if (gguf->find_tensor("rope_factors_long.weight")) generated += 2;
  EXPECT_EQ(gguf->tensors().size(), checked + generated);
  EXPECT_EQ(type == "llama" && config.contains("rope_scaling") ? 1u : 0u,
            gguf->find_tensor("rope_freqs.weight") ? 1u : 0u);
}

TEST(GgufConversion, TensorsAreWhatTheConverterWrites) {
  for (int f = 0; f <= static_cast<int>(SyntheticFamily::kSmolLM3); ++f) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      SyntheticModelSpec spec = tiny_spec(static_cast<SyntheticFamily>(f), 20 + f);
      spec.dtype = dtype;
      expect_converted_tensors(spec);
    }
  }
}

// Llama 3.1's rope_freqs (LlamaModel.generate_extra_tensors) and Phi-3's longrope metadata
// (Phi3MiniModel), recomputed here in double precision from config.json.
TEST(GgufConversion, GeneratedRopeTensorsAndKeysMatchTheConverter) {
  SyntheticModelSpec spec = tiny_spec(SyntheticFamily::kLlama3, 30);
  auto both = write_both(spec);
  nlohmann::json config = read_json(both->hf / "config.json");
  auto gguf = GgufFile::open(both->gguf);
  const nlohmann::json& r = config.at("rope_scaling");
  const double base = config.at("rope_theta"), dim = config.at("head_dim");
  const double factor = r.at("factor"), low = r.at("low_freq_factor"),
               high = r.at("high_freq_factor"), old = r.at("original_max_position_embeddings");
  const std::vector<float> freqs = to_f32(gguf->view(*gguf->find_tensor("rope_freqs.weight")));
  ASSERT_EQ(freqs.size(), static_cast<size_t>(dim / 2));
  int medium = 0;
  for (size_t i = 0; i < freqs.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi * std::pow(base, 2.0 * i / dim);
    double want = 1.0;
    if (wavelen > old / low) {
      want = factor;
    } else if (wavelen >= old / high) {
      const double smooth = (old / wavelen - low) / (high - low);
      want = 1.0 / ((1.0 - smooth) / factor + smooth);
      ++medium;
    }
    EXPECT_NEAR(freqs[i], want, 1e-5 * want) << "frequency " << i;
  }
  EXPECT_EQ(medium, 1);  // the spec puts one frequency in the interpolated band
  EXPECT_EQ(gguf->get_string("general.architecture"), "llama");
  EXPECT_EQ(gguf->get_int("llama.rope.dimension_count"), 12);
  EXPECT_FALSE(gguf->find("llama.rope.scaling.type"));  // llama3 scaling is the tensor alone

  spec = tiny_spec(SyntheticFamily::kPhi3, 31);
  both = write_both(spec);
  config = read_json(both->hf / "config.json");
  gguf = GgufFile::open(both->gguf);
  const double max_pos = config.at("max_position_embeddings");
  const double original = config.at("original_max_position_embeddings");
  EXPECT_EQ(gguf->get_int("phi3.rope.scaling.original_context_length"),
            static_cast<int64_t>(original));
  EXPECT_EQ(gguf->get_int("phi3.context_length"), static_cast<int64_t>(max_pos));
  EXPECT_NEAR(*gguf->get_float("phi3.rope.scaling.attn_factor"),
              std::sqrt(1 + std::log(max_pos / original) / std::log(original)), 1e-6);
  EXPECT_EQ(gguf->get_int("phi3.attention.sliding_window"),
            config.at("sliding_window").get<int64_t>());
  for (const char* which : {"long", "short"}) {
    const std::vector<float> factors =
        to_f32(gguf->view(*gguf->find_tensor(std::string("rope_factors_") + which + ".weight")));
    const auto& want = config.at("rope_scaling").at(std::string(which) + "_factor");
    ASSERT_EQ(factors.size(), want.size());
    for (size_t i = 0; i < factors.size(); ++i) EXPECT_EQ(factors[i], want[i].get<double>());
  }
  EXPECT_FALSE(gguf->find("phi3.attention.key_length"));  // Phi-3 configs have no head_dim
}

// The tokenizer metadata (_set_vocab_gpt2 and SpecialVocab) against tokenizer.json.
TEST(GgufConversion, TokenizerMetadataIsTheTokenizerJson) {
  const auto both = write_both(tiny_spec(SyntheticFamily::kQwen2, 40));
  const nlohmann::json tokenizer = read_json(both->hf / "tokenizer.json");
  const auto gguf = GgufFile::open(both->gguf);
  EXPECT_EQ(gguf->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(gguf->get_string("tokenizer.ggml.pre"), "gpt-2");
  const std::vector<std::string> tokens = *gguf->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), tokenizer.at("model").at("vocab").size());
  for (const auto& [text, id] : tokenizer.at("model").at("vocab").items()) {
    EXPECT_EQ(tokens.at(id.get<size_t>()), text);
  }
  const std::vector<int64_t> types = *gguf->get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), tokens.size());
  for (size_t id = 0; id < types.size(); ++id) {
    EXPECT_EQ(types[id], id == 0 ? 3 : 1) << "token " << id;  // <|endoftext|> is CONTROL
  }
  const std::vector<std::string> merges = *gguf->get_string_array("tokenizer.ggml.merges");
  const nlohmann::json& want_merges = tokenizer.at("model").at("merges");
  ASSERT_EQ(merges.size(), want_merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    EXPECT_EQ(merges[i],
              want_merges[i][0].get<std::string>() + " " + want_merges[i][1].get<std::string>());
  }
  EXPECT_EQ(gguf->get_int("tokenizer.ggml.bos_token_id"), 0);
  EXPECT_EQ(gguf->get_int("tokenizer.ggml.eos_token_id"), 0);
  EXPECT_EQ(gguf->get_bool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_FALSE(gguf->find("tokenizer.chat_template"));  // the folder has none
}

// A Llama with attention_bias and mlp_bias (tests/model/family_models.h), converted by the
// transcription above: LlamaModel.modify_tensors permutes q_proj.bias and k_proj.bias like
// the weights, and the MLP biases become ffn_gate/ffn_up/ffn_down.bias.
TEST(GgufConversion, LlamaBiasesLoadAsTheConverterWritesThem) {
  pagedserve::testing::HfModel hf = pagedserve::testing::llama_model(50);
  hf.config["attention_bias"] = true;
  hf.config["mlp_bias"] = true;
  hf.tensors.clear();
  const pagedserve::testing::FamilyShape shape;
  pagedserve::testing::add_tensors(hf, shape, {.qkv_bias = true, .o_bias = true, .mlp_bias = true},
                                   false, 50);
  TempDir dir;
  hf.write(dir.path());
  const nlohmann::json& c = hf.config;
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  const auto u32 = [&](const char* key, const char* field) {
    w.add_uint32(std::string("llama.") + key, c.at(field).get<uint32_t>());
  };
  u32("context_length", "max_position_embeddings");
  u32("embedding_length", "hidden_size");
  u32("block_count", "num_hidden_layers");
  u32("feed_forward_length", "intermediate_size");
  u32("attention.head_count", "num_attention_heads");
  u32("attention.head_count_kv", "num_key_value_heads");
  u32("attention.key_length", "head_dim");
  u32("attention.value_length", "head_dim");
  u32("vocab_size", "vocab_size");
  u32("rope.dimension_count", "head_dim");
  w.add_float32("llama.rope.freq_base", c.at("rope_theta").get<float>());
  w.add_float32("llama.attention.layer_norm_rms_epsilon", c.at("rms_norm_eps").get<float>());
  w.add_uint32("tokenizer.ggml.bos_token_id", c.at("bos_token_id").get<uint32_t>());
  w.add_uint32("tokenizer.ggml.eos_token_id", c.at("eos_token_id").get<uint32_t>());
  for (const auto& [name, tensor] : hf.tensors) {
    std::vector<float> values = tensor.values;
    if (name.find("q_proj.") != std::string::npos) {
      values = converter_permute(values, tensor.shape[0], shape.heads);
    }
    if (name.find("k_proj.") != std::string::npos) {
      values = converter_permute(values, tensor.shape[0], shape.kv_heads);
    }
    std::vector<std::byte> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    w.add_tensor(llama_cpp_name(name, false), GgmlType::kF32, tensor.shape, std::move(bytes));
  }
  w.write(dir.path() / "model.gguf");

  const LlamaCheckpoint from_hf = open_llama_checkpoint(dir.path());
  const LlamaCheckpoint from_gguf = open_llama_checkpoint(dir.path() / "model.gguf");
  EXPECT_TRUE(from_gguf.config.qkv_bias && from_gguf.config.o_bias && from_gguf.config.mlp_bias);
  expect_same_config(from_hf.config, from_gguf.config);
  const LlamaModel hf_model(from_hf, nullptr);
  const LlamaModel gguf_model(from_gguf, nullptr);
  expect_same_logits(hf_model, gguf_model,
                     {.num_seqs = 3, .min_len = 2, .max_len = 12, .seed = 51});
}

// Tokenizer::from_gguf on make-model's metadata encodes and decodes like tokenizer.json:
// GPT-2's pre-tokenizer splits (contractions, letters, digits, punctuation runs, spaces before
// words and at the end), bytes above 0x7f, and the special token.
TEST(GgufConversion, GgufTokenizerEncodesLikeTokenizerJson) {
  const auto both = write_both(tiny_spec(SyntheticFamily::kGemma3, 60));
  SyntheticModelSpec big = tiny_spec(SyntheticFamily::kLlama, 61);
  big.vocab_size = 3000;  // enough merges that words become single tokens
  const auto big_both = write_both(big);
  for (const BothFormats* model : {both.get(), big_both.get()}) {
    const Tokenizer from_json = Tokenizer::from_dir(model->hf);
    const Tokenizer from_gguf = Tokenizer::from_gguf(*GgufFile::open(model->gguf));
    EXPECT_EQ(from_gguf.vocab_size(), from_json.vocab_size());
    EXPECT_EQ(from_gguf.bos_token_id(), from_json.bos_token_id());
    EXPECT_EQ(from_gguf.eos_token_id(), from_json.eos_token_id());
    // The vocabulary's own merged tokens glued together: their merges span the boundaries the
    // pre-tokenizer keeps (letter|digit, space|punctuation, ...), so a wrong split shows.
    std::mt19937 rng(62);
    std::string mixed;
    for (int i = 0; i < 600; ++i) {
      const int32_t id = 257 + static_cast<int32_t>(rng() % (from_json.vocab_size() - 257));
      mixed += from_json.decode(std::vector<int32_t>{id}, false, false);
    }
    for (const char* text :
         {"Hello world", "Once upon a time, there was a little girl named Lily.",
          "I'm sure they'll say it's 2024: 12345 apples!!   ", "tabs\tand\nnewlines\n\n  x",
          "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80",
          "a<|endoftext|>b", "", mixed.c_str()}) {
      const std::vector<int32_t> ids = from_json.encode(text);
      EXPECT_EQ(from_gguf.encode(text), ids) << std::string(text).substr(0, 80);
      // Without clean-up: llama.cpp's "gpt-2" vocabularies clean spaces on decode (and
      // from_gguf with them), while this tokenizer_config.json says not to.
      EXPECT_EQ(from_gguf.decode(ids, false, false), from_json.decode(ids, false, false));
    }
  }
}

// ---- stories260K: llama.cpp's own conversion against the Hugging Face folder ----

std::vector<int32_t> greedy(const LlamaModel& model, std::vector<int32_t> ids, int steps) {
  const ModelConfig& c = model.config();
  PagedKvCache cache(c.num_hidden_layers, 8, 16, c.num_key_value_heads, c.head_dim);
  const std::vector<int32_t> table = {3, 0, 6, 1};
  ForwardBatch prefill;
  prefill.add_sequence(ids, 0, table, 16, true);
  std::vector<float> logits = model.forward(prefill, cache);
  const size_t prompt = ids.size();
  for (int step = 0; step < steps; ++step) {
    ids.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    ForwardBatch decode;
    decode.add_sequence({ids.back()}, static_cast<int>(ids.size()) - 1, table, 16, true);
    logits = model.forward(decode, cache);
  }
  return {ids.begin() + static_cast<std::ptrdiff_t>(prompt), ids.end()};
}

TEST(GgufConversion, Stories260KGgufMatchesItsHuggingFaceFolder) {
  const LlamaCheckpoint hf = open_llama_checkpoint(pagedserve::testing::stories260k_dir());
  const LlamaCheckpoint gguf =
      open_llama_checkpoint(pagedserve::testing::shared_dir() / "models" / "stories260K.gguf");
  // The two files differ in two facts that do not change the logits: the GGUF keeps a copy of
  // the embeddings as output.weight (the folder ties them) and says context_length 2048 (the
  // folder 512). Everything else must agree.
  ModelConfig gguf_config = gguf.config;
  EXPECT_FALSE(gguf_config.tie_word_embeddings);
  EXPECT_EQ(to_f32(*gguf.lm_head), to_f32(*hf.embed_tokens));
  gguf_config.tie_word_embeddings = hf.config.tie_word_embeddings;
  EXPECT_EQ(gguf_config.max_position_embeddings, 2048);
  gguf_config.max_position_embeddings = hf.config.max_position_embeddings;
  expect_same_config(hf.config, gguf_config);
  const LlamaModel hf_model(hf, nullptr);
  const LlamaModel gguf_model(gguf, nullptr);
  for (int n : {1, 4}) {
    expect_same_logits(hf_model, gguf_model,
                       {.num_seqs = n, .min_len = 4, .max_len = 40, .seed = 500u + n});
  }
  const Tokenizer tokenizer = Tokenizer::from_dir(pagedserve::testing::stories260k_dir());
  const std::vector<int32_t> prompt = tokenizer.encode("Once upon a time");
  const std::vector<int32_t> from_hf = greedy(hf_model, prompt, 24);
  EXPECT_EQ(greedy(gguf_model, prompt, 24), from_hf);
  EXPECT_TRUE(tokenizer.decode(from_hf).starts_with(", there was a little girl named Lily."))
      << tokenizer.decode(from_hf);
}

}  // namespace
}  // namespace pagedserve::model
