// Tests for load_llama_weights: stories260K checked against an independent reader, a random
// tiny Llama loaded from one file and from shards, and one test per bad model directory.
#include "model/loader/llama_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>

#include "model/loader/model_error.h"
#include "tests/model/loader/loader_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

using ::testing::HasSubstr;
using testing::RawTensor;
using testing::TempDir;
using testing::TinyLlama;

std::string load_error(const std::filesystem::path& dir) {
  try {
    load_llama_weights(dir);
  } catch (const ModelError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ModelError for " << dir;
  return "";
}

// Every weight of `w` paired with its Hugging Face name.
std::vector<std::pair<std::string, const std::vector<float>*>> named_weights(
    const LlamaWeights& w) {
  std::vector<std::pair<std::string, const std::vector<float>*>> out = {
      {"model.embed_tokens.weight", &w.embed_tokens}, {"model.norm.weight", &w.final_norm}};
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const LlamaLayerWeights& l = w.layers[i];
    out.insert(out.end(), {{p + "input_layernorm.weight", &l.input_norm},
                           {p + "self_attn.q_proj.weight", &l.wq},
                           {p + "self_attn.k_proj.weight", &l.wk},
                           {p + "self_attn.v_proj.weight", &l.wv},
                           {p + "self_attn.o_proj.weight", &l.wo},
                           {p + "post_attention_layernorm.weight", &l.post_norm},
                           {p + "mlp.gate_proj.weight", &l.w_gate},
                           {p + "mlp.up_proj.weight", &l.w_up},
                           {p + "mlp.down_proj.weight", &l.w_down}});
  }
  if (!w.lm_head.empty()) out.emplace_back("lm_head.weight", &w.lm_head);
  return out;
}

TEST(LlamaWeights, Stories260K) {
  const auto dir = pagedserve::testing::stories260k_dir();
  const LlamaWeights w = load_llama_weights(dir);
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.bos_token_id, 1);

  EXPECT_EQ(w.embed_tokens.size(), 512u * 64);
  EXPECT_EQ(w.final_norm.size(), 64u);
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(&w.output_projection(), &w.embed_tokens);
  ASSERT_EQ(w.layers.size(), 5u);
  for (const LlamaLayerWeights& l : w.layers) {
    EXPECT_EQ(l.input_norm.size(), 64u);
    EXPECT_EQ(l.wq.size(), 64u * 64);
    EXPECT_EQ(l.wk.size(), 32u * 64);
    EXPECT_EQ(l.wv.size(), 32u * 64);
    EXPECT_EQ(l.wo.size(), 64u * 64);
    EXPECT_EQ(l.post_norm.size(), 64u);
    EXPECT_EQ(l.w_gate.size(), 172u * 64);
    EXPECT_EQ(l.w_up.size(), 172u * 64);
    EXPECT_EQ(l.w_down.size(), 64u * 172);
  }
  // Every value against a second reader that shares no code with the loader.
  const auto file = dir / "model.safetensors";
  const auto weights = named_weights(w);
  EXPECT_EQ(weights.size(), 2u + 5 * 9);
  for (const auto& [name, values] : weights) {
    EXPECT_EQ(*values, testing::read_f32_tensor(file, name)) << name;
  }
  // And a spot check that the tensors are not all alike (the reader could share a bug).
  EXPECT_NE(w.layers[0].wq, w.layers[1].wq);
  EXPECT_NE(w.layers[4].w_down[0], 0.0f);
}

TEST(LlamaWeights, TinyLlamaValuesMatchTheWrittenFile) {
  TempDir dir;
  const TinyLlama tiny;
  const std::vector<RawTensor> written = tiny.write(dir.path(), 7);
  const LlamaWeights w = load_llama_weights(dir.path());
  EXPECT_EQ(w.config.num_key_value_heads, 1);
  const auto loaded = named_weights(w);
  ASSERT_EQ(loaded.size(), written.size());
  for (const auto& [name, values] : loaded) {
    const auto it = std::find_if(written.begin(), written.end(),
                                 [&wanted = name](const RawTensor& t) { return t.name == wanted; });
    ASSERT_NE(it, written.end()) << name;
    EXPECT_EQ(*values, testing::f32_values(*it)) << name;
  }
  EXPECT_EQ(&w.output_projection(), &w.lm_head);
}

TEST(LlamaWeights, ShardedMatchesUnsharded) {
  const TinyLlama tiny;
  TempDir single;
  const std::vector<RawTensor> tensors = tiny.write(single.path(), 11);

  // Split the same tensors across two shards, in a different order than the single file.
  TempDir sharded;
  testing::write_json(sharded / "config.json", tiny.config());
  std::vector<RawTensor> first, second;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const bool to_first = i % 2 == 1;
    (to_first ? first : second).push_back(tensors[i]);
    weight_map[tensors[i].name] =
        to_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  testing::write_safetensors(sharded / "model-00001-of-00002.safetensors", first);
  testing::write_safetensors(sharded / "model-00002-of-00002.safetensors", second);
  testing::write_json(sharded / "model.safetensors.index.json",
                      {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});

  const LlamaWeights a = load_llama_weights(single.path());
  const LlamaWeights b = load_llama_weights(sharded.path());
  const auto wa = named_weights(a);
  const auto wb = named_weights(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    EXPECT_EQ(wa[i].first, wb[i].first);
    EXPECT_EQ(*wa[i].second, *wb[i].second) << wa[i].first;
  }
}

TEST(LlamaWeights, TiedIgnoresAnLmHeadCopy) {
  TinyLlama tiny;
  tiny.tied = true;
  TempDir dir;
  tiny.write(dir.path(), 3, /*with_lm_head=*/true);
  const LlamaWeights w = load_llama_weights(dir.path());
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(&w.output_projection(), &w.embed_tokens);
}

TEST(LlamaWeights, Bf16WeightsAreWidened) {
  TinyLlama tiny;
  TempDir dir;
  std::vector<RawTensor> tensors = tiny.tensors(5, false);
  // Store every tensor as BF16 by keeping the top half of each float: the loaded value must be
  // exactly that truncated float.
  std::vector<std::vector<float>> expected;
  for (RawTensor& t : tensors) {
    std::vector<uint16_t> halves;
    std::vector<float> truncated;
    for (float v : testing::f32_values(t)) {
      const auto bits = std::bit_cast<uint32_t>(v);
      halves.push_back(static_cast<uint16_t>(bits >> 16));
      truncated.push_back(std::bit_cast<float>(bits & 0xffff0000u));
    }
    t.dtype = "BF16";
    t.bytes = testing::u16_bytes(halves);
    expected.push_back(std::move(truncated));
  }
  testing::write_json(dir / "config.json", tiny.config());
  testing::write_safetensors(dir / "model.safetensors", tensors);
  const LlamaWeights w = load_llama_weights(dir.path());
  EXPECT_EQ(w.embed_tokens, expected.front());
  EXPECT_EQ(w.lm_head, expected.back());
  EXPECT_EQ(w.layers[1].w_down, expected[expected.size() - 3]);
}

TEST(LlamaWeights, MissingDirectoryConfigOrWeights) {
  TempDir dir;
  EXPECT_THAT(load_error(dir / "absent"), HasSubstr("absent: model directory not found"));
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr((dir / "config.json").string() + ": file not found"));
  testing::write_json(dir / "config.json", TinyLlama{}.config());
  EXPECT_THAT(
      load_error(dir.path()),
      HasSubstr(dir.path().string() + ": no model.safetensors or model.safetensors.index.json"));
}

TEST(LlamaWeights, BadConfigStopsTheLoad) {
  TempDir dir;
  TinyLlama{}.write(dir.path(), 1);
  testing::write_file(dir / "config.json", "{oops");
  EXPECT_THAT(load_error(dir.path()), HasSubstr("config.json: invalid JSON"));
  nlohmann::json config = TinyLlama{}.config();
  config["rope_scaling"] = {{"rope_type", "mrope"}};
  testing::write_json(dir / "config.json", config);
  EXPECT_THAT(load_error(dir.path()), HasSubstr("rope_scaling type mrope is not supported"));
  // A config announcing biases makes them required tensors.
  config = TinyLlama{}.config();
  config["attention_bias"] = true;
  testing::write_json(dir / "config.json", config);
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("missing tensor model.layers.0.self_attn.q_proj.bias"));
}

TEST(LlamaWeights, WrongShape) {
  TempDir dir;
  TinyLlama tiny;
  tiny.write(dir.path(), 1);
  // The same file read with a config whose ffn disagrees.
  tiny.ffn = 6;
  testing::write_json(dir / "config.json", tiny.config());
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr((dir / "model.safetensors").string() +
                        ": tensor model.layers.0.mlp.gate_proj.weight has shape [12, 8], "
                        "expected [6, 8]"));
}

TEST(LlamaWeights, MissingTensor) {
  for (const std::string removed :
       {"model.norm.weight", "lm_head.weight", "model.layers.1.self_attn.v_proj.weight"}) {
    TempDir dir;
    const TinyLlama tiny;
    std::vector<RawTensor> tensors = tiny.write(dir.path(), 1);
    std::erase_if(tensors, [&](const RawTensor& t) { return t.name == removed; });
    testing::write_safetensors(dir / "model.safetensors", tensors);
    EXPECT_THAT(load_error(dir.path()),
                HasSubstr((dir / "model.safetensors").string() + ": missing tensor " + removed));
  }
}

TEST(LlamaWeights, HugeLayerCountIsRefusedBeforeAnyAllocation) {
  TempDir dir;
  const TinyLlama tiny;
  tiny.write(dir.path(), 1);
  nlohmann::json config = tiny.config();
  config["num_hidden_layers"] = 2147483647;
  testing::write_json(dir / "config.json", config);
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("num_hidden_layers 2147483647 is more than 65536"));
  // A plausible count still ends in the first missing tensor.
  config["num_hidden_layers"] = 60000;
  testing::write_json(dir / "config.json", config);
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("missing tensor model.layers.2.input_layernorm.weight"));
}

TEST(LlamaWeights, BiasTensorRejected) {
  TempDir dir;
  const TinyLlama tiny;
  std::vector<RawTensor> tensors = tiny.tensors(1, false);
  tensors.push_back({"model.layers.1.self_attn.q_proj.bias",
                     "F32",
                     {8},
                     testing::f32_bytes(std::vector<float>(8, 0.5f))});
  testing::write_json(dir / "config.json", tiny.config());
  testing::write_safetensors(dir / "model.safetensors", tensors);
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("tensor model.layers.1.self_attn.q_proj.bias is a bias its config.json does not announce"));
}

TEST(LlamaWeights, ShardMissingFromDisk) {
  TempDir dir;
  const TinyLlama tiny;
  testing::write_json(dir / "config.json", tiny.config());
  const std::vector<RawTensor> tensors = tiny.tensors(1, false);
  nlohmann::json weight_map = nlohmann::json::object();
  for (const RawTensor& t : tensors) weight_map[t.name] = "model-00001-of-00001.safetensors";
  testing::write_json(dir / "model.safetensors.index.json", {{"weight_map", weight_map}});
  const std::string message = load_error(dir.path());
  EXPECT_THAT(message, HasSubstr("model.safetensors.index.json: shard "
                                 "model-00001-of-00001.safetensors listed in weight_map"));
  EXPECT_THAT(message, HasSubstr("file not found"));
}

}  // namespace
}  // namespace pagedserve::model
