// GgufFile on the real GGUF files in ../shared: llama.cpp's stories260K test model, checked
// against the same model's Hugging Face folder (config.json for the dimensions, an independent
// reader of model.safetensors for the bytes), and the vocabulary-only tokenizer files, checked
// against their README and token-id test vectors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/loader/gguf.h"
#include "tests/model/loader/loader_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

using pagedserve::testing::shared_dir;
using pagedserve::testing::stories260k_dir;
using ::testing::ElementsAre;

nlohmann::json stories_config() {
  std::ifstream in(stories260k_dir() / "config.json");
  return nlohmann::json::parse(in);
}

TEST(GgufRealFiles, Stories260kMetadataMatchesConfigJson) {
  const auto file = GgufFile::open(shared_dir() / "models" / "stories260K.gguf");
  const nlohmann::json config = stories_config();
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_int("llama.embedding_length"), config["hidden_size"].get<int64_t>());
  EXPECT_EQ(file->get_int("llama.feed_forward_length"), config["intermediate_size"].get<int64_t>());
  EXPECT_EQ(file->get_int("llama.block_count"), config["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(file->get_int("llama.attention.head_count"),
            config["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(file->get_int("llama.attention.head_count_kv"),
            config["num_key_value_heads"].get<int64_t>());
  EXPECT_FLOAT_EQ(static_cast<float>(*file->get_float("llama.attention.layer_norm_rms_epsilon")),
                  config["rms_norm_eps"].get<float>());
  EXPECT_EQ(file->get_int("tokenizer.ggml.bos_token_id"), config["bos_token_id"].get<int64_t>());
  EXPECT_EQ(file->get_int("tokenizer.ggml.eos_token_id"), config["eos_token_id"].get<int64_t>());

  const int64_t vocab = config["vocab_size"].get<int64_t>();
  const std::vector<std::string> tokens = *file->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), vocab);
  // The README: ids 0 <unk>, 1 <s>, 2 </s>, then byte tokens from id 3.
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(file->get_float_array("tokenizer.ggml.scores")->size(), tokens.size());
  EXPECT_EQ(file->get_int_array("tokenizer.ggml.token_type")->size(), tokens.size());
}

TEST(GgufRealFiles, Stories260kTensorsMatchTheSafetensorsModel) {
  const auto file = GgufFile::open(shared_dir() / "models" / "stories260K.gguf");
  const nlohmann::json config = stories_config();
  const int64_t hidden = config["hidden_size"];
  const int64_t ffn = config["intermediate_size"];
  const int64_t vocab = config["vocab_size"];
  const int64_t layers = config["num_hidden_layers"];
  const int64_t kv =
      config["num_key_value_heads"].get<int64_t>() * config["head_dim"].get<int64_t>();
  // embedding, final norm, output (llama.cpp writes it even when tied) and 9 per layer.
  EXPECT_EQ(static_cast<int64_t>(file->tensors().size()), 3 + 9 * layers);
  EXPECT_THAT(file->find_tensor("token_embd.weight")->shape(), ElementsAre(vocab, hidden));
  EXPECT_THAT(file->find_tensor("token_embd.weight")->ne, ElementsAre(hidden, vocab));
  EXPECT_THAT(file->find_tensor("output_norm.weight")->shape(), ElementsAre(hidden));
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    EXPECT_THAT(file->find_tensor(p + "attn_q.weight")->shape(), ElementsAre(hidden, hidden));
    EXPECT_THAT(file->find_tensor(p + "attn_k.weight")->shape(), ElementsAre(kv, hidden));
    EXPECT_THAT(file->find_tensor(p + "ffn_gate.weight")->shape(), ElementsAre(ffn, hidden));
    EXPECT_THAT(file->find_tensor(p + "ffn_down.weight")->shape(), ElementsAre(hidden, ffn));
    EXPECT_THAT(file->find_tensor(p + "attn_norm.weight")->shape(), ElementsAre(hidden));
  }
  for (const auto& [name, tensor] : file->tensors()) {
    EXPECT_EQ(ggml_type_name(tensor.type), "F32") << name;
  }

  // Tensors GGUF stores unpermuted hold the same floats as the Hugging Face checkpoint.
  const std::filesystem::path safetensors = stories260k_dir() / "model.safetensors";
  const std::pair<const char*, const char*> same[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
      {"blk.4.attn_v.weight", "model.layers.4.self_attn.v_proj.weight"},
  };
  for (const auto& [gguf_name, hf_name] : same) {
    const TensorView view = file->view(*file->find_tensor(gguf_name));
    EXPECT_EQ(to_f32(view), testing::read_f32_tensor(safetensors, hf_name)) << gguf_name;
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(GgufRealFiles, VocabularyFilesHoldTheirTokenizers) {
  struct Case {
    const char* name;
    const char* model;
    std::optional<int64_t> tokens;  // from the README, where it says
  };
  const Case cases[] = {{"llama-spm", "llama", 32000},
                        {"starcoder", "gpt2", std::nullopt},
                        {"deepseek-coder", "gpt2", std::nullopt},
                        {"deepseek-llm", "gpt2", std::nullopt}};
  for (const Case& c : cases) {
    const std::filesystem::path path =
        shared_dir() / "tokenizers" / "gguf" / ("ggml-vocab-" + std::string(c.name) + ".gguf");
    const auto file = GgufFile::open(path);
    EXPECT_TRUE(file->tensors().empty()) << c.name;
    EXPECT_EQ(file->get_string("tokenizer.ggml.model"), c.model) << c.name;
    const auto tokens = *file->get_string_array("tokenizer.ggml.tokens");
    if (c.tokens) {
      EXPECT_EQ(static_cast<int64_t>(tokens.size()), *c.tokens) << c.name;
    }
    if (const auto vocab_size = file->get_int("llama.vocab_size")) {
      EXPECT_EQ(static_cast<int64_t>(tokens.size()), *vocab_size) << c.name;
    }
    EXPECT_EQ(file->get_int_array("tokenizer.ggml.token_type")->size(), tokens.size());
    if (std::string(c.model) == "gpt2") {
      EXPECT_FALSE(file->get_string_array("tokenizer.ggml.merges")->empty()) << c.name;
    }
    // Every id in the expected encodings names a token.
    int64_t max_id = -1;
    for (const std::string& line : split_lines(testing::read_file(path.string() + ".out"))) {
      std::istringstream ids(line);
      for (int64_t id; ids >> id;) max_id = std::max(max_id, id);
    }
    EXPECT_GE(max_id, 0) << c.name;
    EXPECT_LT(max_id, static_cast<int64_t>(tokens.size())) << c.name;
  }
}

}  // namespace
}  // namespace pagedserve::model
