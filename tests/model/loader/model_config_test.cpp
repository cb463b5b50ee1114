// Tests for load_model_config: the stories260K config, defaults, and one test per rejected
// input, each checking that the message names config.json and the problem.
#include "model/loader/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/loader/model_error.h"
#include "tests/model/loader/loader_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::TinyLlama;
using testing::write_file;
using testing::write_json;

// Runs load_model_config on `config` written to a temp config.json and returns the
// ModelError message ("" if it loaded).
std::string config_error(const nlohmann::json& config) {
  TempDir dir;
  write_json(dir / "config.json", config);
  try {
    load_model_config(dir / "config.json");
  } catch (const ModelError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr((dir / "config.json").string()));
    return message;
  }
  return "";
}

ModelConfig config_of(const nlohmann::json& config) {
  TempDir dir;
  write_json(dir / "config.json", config);
  return load_model_config(dir / "config.json");
}

TEST(ModelConfig, Stories260K) {
  const ModelConfig c = load_model_config(pagedserve::testing::stories260k_dir() / "config.json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(ModelConfig, DefaultsWhenOptionalFieldsAreAbsent) {
  TempDir dir;
  // model_type alone identifies Llama in older exports; head_dim and kv heads are derived.
  write_json(dir / "config.json", {{"model_type", "llama"},
                                   {"hidden_size", 32},
                                   {"intermediate_size", 64},
                                   {"num_hidden_layers", 1},
                                   {"num_attention_heads", 4},
                                   {"vocab_size", 100},
                                   {"head_dim", nullptr}});
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(ModelConfig, EosAsListAndNewDtypeKey) {
  nlohmann::json config = TinyLlama{}.config();
  config["eos_token_id"] = {128001, 128008, 128009};
  config.erase("torch_dtype");
  config["dtype"] = "bfloat16";
  config["rope_scaling"] = nullptr;  // null means "none" and is accepted
  TempDir dir;
  write_json(dir / "config.json", config);
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(ModelConfig, MissingFile) {
  TempDir dir;
  try {
    load_model_config(dir / "config.json");
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "config.json").string() + ": file not found"));
  }
}

TEST(ModelConfig, InvalidJson) {
  TempDir dir;
  write_file(dir / "config.json", "{\"hidden_size\": 64,");
  try {
    load_model_config(dir / "config.json");
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "config.json").string() + ": invalid JSON"));
  }
}

TEST(ModelConfig, DeepNestingIsRefused) {
  TempDir dir;
  write_file(dir / "config.json",
             "{\"rope_scaling\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  try {
    load_model_config(dir / "config.json");
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.json: invalid JSON: nesting deeper than"));
  }
}

TEST(ModelConfig, TopLevelNotAnObject) {
  EXPECT_THAT(config_error(nlohmann::json::array({1, 2})), HasSubstr("must be a JSON object"));
}

TEST(ModelConfig, MissingField) {
  nlohmann::json config = TinyLlama{}.config();
  config.erase("intermediate_size");
  EXPECT_THAT(config_error(config), HasSubstr("missing field intermediate_size"));
}

TEST(ModelConfig, WrongTypes) {
  nlohmann::json config = TinyLlama{}.config();
  config["hidden_size"] = "64";
  EXPECT_THAT(config_error(config), HasSubstr("field hidden_size must be an integer, got string"));
  config = TinyLlama{}.config();
  config["num_hidden_layers"] = 2.0;
  EXPECT_THAT(config_error(config),
              HasSubstr("field num_hidden_layers must be an integer, got float"));
  config = TinyLlama{}.config();
  config["tie_word_embeddings"] = "yes";
  EXPECT_THAT(config_error(config), HasSubstr("field tie_word_embeddings must be a boolean"));
  config = TinyLlama{}.config();
  config["rms_norm_eps"] = "1e-5";
  EXPECT_THAT(config_error(config), HasSubstr("field rms_norm_eps must be a number"));
  config = TinyLlama{}.config();
  config["eos_token_id"] = "</s>";
  EXPECT_THAT(config_error(config), HasSubstr("field eos_token_id must be an integer or a list"));
  config = TinyLlama{}.config();
  config["eos_token_id"] = {2, "x"};
  EXPECT_THAT(config_error(config), HasSubstr("eos_token_id entry must be an integer"));
  config = TinyLlama{}.config();
  config["architectures"] = "LlamaForCausalLM";
  EXPECT_THAT(config_error(config), HasSubstr("field architectures must be a list of strings"));
  config = TinyLlama{}.config();
  config["vocab_size"] = 1ull << 40;
  EXPECT_THAT(config_error(config), HasSubstr("field vocab_size is out of range"));
}

TEST(ModelConfig, NonPositiveSizes) {
  for (const char* field :
       {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings"}) {
    nlohmann::json config = TinyLlama{}.config();
    config[field] = field == std::string("vocab_size") ? -5 : 0;
    EXPECT_THAT(config_error(config),
                HasSubstr(std::string("field ") + field + " must be positive"))
        << field;
  }
  nlohmann::json config = TinyLlama{}.config();
  config["rms_norm_eps"] = 0.0;
  EXPECT_THAT(config_error(config), HasSubstr("field rms_norm_eps must be positive"));
}

TEST(ModelConfig, HeadsNotAMultipleOfKvHeads) {
  nlohmann::json config = TinyLlama{}.config();
  config["num_attention_heads"] = 6;
  config["num_key_value_heads"] = 4;
  EXPECT_THAT(config_error(config),
              HasSubstr("num_attention_heads 6 is not a multiple of num_key_value_heads 4"));
}

TEST(ModelConfig, HiddenNotAMultipleOfHeadsWithoutHeadDim) {
  nlohmann::json config = TinyLlama{}.config();
  config.erase("head_dim");
  config["hidden_size"] = 10;
  config["num_attention_heads"] = 4;
  config["num_key_value_heads"] = 2;
  EXPECT_THAT(config_error(config), HasSubstr("hidden_size 10 is not a multiple"));
}

TEST(ModelConfig, UnsupportedArchitecture) {
  nlohmann::json config = TinyLlama{}.config();
  config["architectures"] = {"GPT2LMHeadModel"};
  const std::string message = config_error(config);
  EXPECT_THAT(message, HasSubstr("config.json: unsupported architecture GPT2LMHeadModel"));
  for (const char* supported : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                "Qwen3ForCausalLM", "Phi3ForCausalLM", "Gemma2ForCausalLM",
                                "Gemma3ForCausalLM", "SmolLM3ForCausalLM"}) {
    EXPECT_THAT(message, HasSubstr(supported));
  }
  config.erase("architectures");
  config["model_type"] = "gpt2";
  EXPECT_THAT(config_error(config), HasSubstr("unsupported architecture gpt2"));
  config["model_type"] = "mistral";  // model_type alone names the family
  EXPECT_EQ(config_error(config), "");
  config.erase("model_type");
  EXPECT_THAT(config_error(config), HasSubstr("unsupported architecture"));
}

TEST(ModelConfig, UnsupportedFeaturesAreNamed) {
  nlohmann::json config = TinyLlama{}.config();
  config["rope_scaling"] = {{"rope_type", "mrope"}, {"factor", 8.0}};
  EXPECT_THAT(config_error(config), HasSubstr("rope_scaling type mrope is not supported"));
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_THAT(config_error(config), HasSubstr("needs original_max_position_embeddings"));
  config = TinyLlama{}.config();
  config["hidden_act"] = "relu";
  EXPECT_THAT(config_error(config), HasSubstr("hidden_act relu is not supported"));
  config = TinyLlama{}.config();
  config["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < config["num_hidden_layers"].get<int>(); ++i) {
    config["layer_types"].push_back("chunked_attention");
  }
  EXPECT_THAT(config_error(config), HasSubstr("layer type chunked_attention is not supported"));
  config = TinyLlama{}.config();
  config["partial_rotary_factor"] = 1.5;
  EXPECT_THAT(config_error(config), HasSubstr("partial_rotary_factor must be in (0, 1]"));
}

TEST(ModelConfig, FamilySwitchesFollowTheirConfigClasses) {
  nlohmann::json config = TinyLlama{}.config();
  config["attention_bias"] = true;
  config["mlp_bias"] = true;
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0},
                            {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}};
  ModelConfig c = config_of(config);
  EXPECT_TRUE(c.qkv_bias && c.o_bias && c.mlp_bias);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);

  config = TinyLlama{}.config();
  config["architectures"] = {"Gemma2ForCausalLM"};
  config["sliding_window"] = 4;
  config["query_pre_attn_scalar"] = 16;
  config["attn_logit_softcapping"] = 50.0;
  config.erase("tie_word_embeddings");
  c = config_of(config);
  EXPECT_TRUE(c.tie_word_embeddings);  // Gemma's default
  EXPECT_TRUE(c.sandwich_norms);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_FLOAT_EQ(c.attention_scale, 0.25f);
  EXPECT_FLOAT_EQ(c.norm_weight_offset, 1.0f);
  ASSERT_EQ(static_cast<int>(c.layers.size()), c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    EXPECT_EQ(c.layers[i].sliding_window, i % 2 == 0 ? 4 : 0) << "layer " << i;
  }
}

}  // namespace
}  // namespace pagedserve::model
