// Tokenizer::from_gguf on hand-built GGUF vocabularies: which merge the scores make win,
// byte fallback, the add_bos/add_eos keys, control tokens, byte-level merges, and every kind
// of bad metadata giving a ModelError that names the file and the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/loader/gguf.h"
#include "model/loader/model_error.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/model/loader/gguf_test_util.h"

namespace pagedserve::model {
namespace {

using Ids = std::vector<int32_t>;
using testing::Bytes;
namespace raw = testing::gguf_raw;

// A metadata-only GGUF file written byte by byte (tests/model/loader/gguf_test_util.h).
class GgufWriter {
 public:
  void add_string(std::string_view key, std::string_view value) {
    builder_.kv(key, raw::kString, Bytes().str(value));
  }
  void add_uint32(std::string_view key, uint32_t value) {
    builder_.kv(key, raw::kU32, Bytes().u32(value));
  }
  void add_bool(std::string_view key, bool value) {
    builder_.kv(key, raw::kBool, Bytes().u8(value ? 1 : 0));
  }
  void add_string_array(std::string_view key, const std::vector<std::string>& values) {
    Bytes payload;
    payload.array(raw::kString, values.size());
    for (const std::string& value : values) payload.str(value);
    builder_.kv(key, raw::kArray, payload);
  }
  void add_float32_array(std::string_view key, const std::vector<float>& values) {
    Bytes payload;
    payload.array(raw::kF32, values.size());
    for (const float value : values) payload.f32(value);
    builder_.kv(key, raw::kArray, payload);
  }
  void add_int32_array(std::string_view key, const std::vector<int32_t>& values) {
    Bytes payload;
    payload.array(raw::kI32, values.size());
    for (const int32_t value : values) payload.u32(static_cast<uint32_t>(value));
    builder_.kv(key, raw::kArray, payload);
  }
  void write(const std::filesystem::path& path) const {
    std::ofstream(path, std::ios::binary) << builder_.build();
  }

 private:
  testing::GgufBuilder builder_;
};

class GgufTokenizerSynthetic : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove(path_); }

  Tokenizer load(const GgufWriter& writer) {
    writer.write(path_);
    return Tokenizer::from_gguf(*GgufFile::open(path_));
  }
  // The ModelError message of loading `writer`'s file, "" when it loads.
  std::string load_error(const GgufWriter& writer) {
    try {
      load(writer);
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  }

  const std::filesystem::path path_ = std::filesystem::temp_directory_path() /
                                      ("ps_gguf_tokenizer_" + std::to_string(::getpid()) + ".gguf");
};

// A SentencePiece vocabulary: <unk> <s> </s> ▁ a b ab ▁a <0x63> ('c'); "ab" and "▁a" compete.
GgufWriter llama_vocab(float score_ab, float score_space_a,
                       const std::vector<int32_t>& types = {2, 3, 3, 1, 1, 1, 1, 1, 6}) {
  GgufWriter writer;
  writer.add_string("tokenizer.ggml.model", "llama");
  writer.add_string_array("tokenizer.ggml.tokens",
                          {"<unk>", "<s>", "</s>", "\u2581", "a", "b", "ab", "\u2581a", "<0x63>"});
  writer.add_float32_array("tokenizer.ggml.scores",
                           {0, 0, 0, -1, -2, -3, score_ab, score_space_a, 0});
  writer.add_int32_array("tokenizer.ggml.token_type", types);
  return writer;
}

TEST_F(GgufTokenizerSynthetic, HigherScoringMergeWins) {
  // "ab" -> "▁ab": the pairs (▁, a) and (a, b) compete; neither "▁ab" exists.
  EXPECT_EQ(load(llama_vocab(-4, -5)).encode("ab", false), (Ids{3, 6}));  // ▁ ab
  EXPECT_EQ(load(llama_vocab(-5, -4)).encode("ab", false), (Ids{7, 5}));  // ▁a b
}

TEST_F(GgufTokenizerSynthetic, ByteFallbackUnknownAndDefaults) {
  const Tokenizer tokenizer = load(llama_vocab(-4, -5));
  EXPECT_EQ(tokenizer.encode("c", false), (Ids{3, 8}));     // <0x63>
  EXPECT_EQ(tokenizer.encode("dd", false), (Ids{3, 0}));    // no byte token: one fused <unk>
  EXPECT_EQ(tokenizer.encode("ab", true), (Ids{1, 3, 6}));  // llama adds BOS by default
  EXPECT_EQ(tokenizer.bos_token_id(), 1);                   // llama.cpp's default ids
  EXPECT_EQ(tokenizer.eos_token_id(), 2);
  EXPECT_EQ(tokenizer.decode(Ids{1, 3, 6, 8}, false), "<s> abc");
  EXPECT_EQ(tokenizer.decode(Ids{1, 3, 6, 8}, true), "abc");
  EXPECT_TRUE(tokenizer.is_special(0));
  EXPECT_TRUE(tokenizer.is_special(2));
  EXPECT_FALSE(tokenizer.is_special(6));
  // Control tokens are matched whole in the text.
  EXPECT_EQ(tokenizer.encode("ab</s>", false), (Ids{3, 6, 2}));
}

// Converters write 4294967295 for "no such token"; llama.cpp then keeps its default id.
TEST_F(GgufTokenizerSynthetic, OutOfRangeSpecialIdsAreIgnored) {
  GgufWriter writer = llama_vocab(-4, -5);
  writer.add_uint32("tokenizer.ggml.bos_token_id", 4294967295u);
  writer.add_uint32("tokenizer.ggml.eos_token_id", 9);  // 9 tokens: ids 0..8
  writer.add_uint32("tokenizer.ggml.padding_token_id", 4294967295u);
  const Tokenizer tokenizer = load(writer);
  EXPECT_EQ(tokenizer.bos_token_id(), 1);
  EXPECT_EQ(tokenizer.eos_token_id(), 2);
  EXPECT_EQ(tokenizer.encode("c", true), (Ids{1, 3, 8}));
}

TEST_F(GgufTokenizerSynthetic, AddBosAndEosKeys) {
  GgufWriter writer = llama_vocab(-4, -5);
  writer.add_bool("tokenizer.ggml.add_bos_token", false);
  writer.add_bool("tokenizer.ggml.add_eos_token", true);
  writer.add_uint32("tokenizer.ggml.eos_token_id", 6);
  EXPECT_EQ(load(writer).encode("c", true), (Ids{3, 8, 6}));
}

// Byte-level: Ġ is the byte-level space; "a b" ranks before "Ġ a", then "1 2".
GgufWriter gpt2_vocab(const std::string& pre,
                      const std::vector<std::string>& merges = {"a b", "\u0120 a", "1 2"}) {
  GgufWriter writer;
  writer.add_string("tokenizer.ggml.model", "gpt2");
  writer.add_string("tokenizer.ggml.pre", pre);
  writer.add_string_array("tokenizer.ggml.tokens",
                          {"a", "b", "ab", "\u0120", "\u0120a", "<|end|>", "1", "2", "12"});
  writer.add_int32_array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 3, 1, 1, 1});
  writer.add_string_array("tokenizer.ggml.merges", merges);
  writer.add_uint32("tokenizer.ggml.eos_token_id", 5);
  return writer;
}

TEST_F(GgufTokenizerSynthetic, ByteLevelMergesAndControlTokens) {
  const Tokenizer tokenizer = load(gpt2_vocab("gpt-2"));
  EXPECT_EQ(tokenizer.encode("ab ab", true), (Ids{2, 3, 2}));  // gpt2: no BOS by default
  EXPECT_EQ(tokenizer.encode(" a<|end|>", false), (Ids{4, 5}));
  EXPECT_EQ(tokenizer.decode(Ids{2, 4, 5}, false), "ab a<|end|>");
  EXPECT_EQ(tokenizer.decode(Ids{2, 4, 5}, true), "ab a");
  // starcoder isolates each digit before merging; gpt-2 keeps "12" one word.
  EXPECT_EQ(tokenizer.encode("12", false), (Ids{8}));
  EXPECT_EQ(load(gpt2_vocab("starcoder")).encode("12", false), (Ids{6, 7}));
}

TEST_F(GgufTokenizerSynthetic, UnknownPreTokenizerIsNamedWithTheSupportedOnes) {
  const std::string error = load_error(gpt2_vocab("no-such-pre"));
  EXPECT_NE(error.find(path_.string()), std::string::npos) << error;
  EXPECT_NE(error.find("tokenizer.ggml.pre"), std::string::npos) << error;
  EXPECT_NE(error.find("no-such-pre"), std::string::npos) << error;
  for (const char* name : {"llama-bpe", "qwen2", "smollm", "starcoder", "deepseek-llm",
                           "deepseek-coder", "default", "gpt-2"}) {
    EXPECT_NE(error.find(name), std::string::npos) << name << " missing from: " << error;
  }
}

// Each bad file's error names the file and the key.
TEST_F(GgufTokenizerSynthetic, BadMetadataNamesFileAndKey) {
  const auto expect_error = [&](const GgufWriter& writer, const std::string& key) {
    const std::string error = load_error(writer);
    EXPECT_NE(error.find(path_.string()), std::string::npos) << error;
    EXPECT_NE(error.find(key), std::string::npos) << "expected " << key << " in: " << error;
  };
  GgufWriter no_model;
  no_model.add_string_array("tokenizer.ggml.tokens", {"a"});
  expect_error(no_model, "tokenizer.ggml.model");

  GgufWriter no_tokens;
  no_tokens.add_string("tokenizer.ggml.model", "llama");
  expect_error(no_tokens, "tokenizer.ggml.tokens");

  GgufWriter unknown_model;
  unknown_model.add_string("tokenizer.ggml.model", "bert");
  unknown_model.add_string_array("tokenizer.ggml.tokens", {"a"});
  expect_error(unknown_model, "tokenizer.ggml.model");
  EXPECT_NE(load_error(unknown_model).find("bert"), std::string::npos);

  GgufWriter short_scores;
  short_scores.add_string("tokenizer.ggml.model", "llama");
  short_scores.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  short_scores.add_float32_array("tokenizer.ggml.scores", {0});
  expect_error(short_scores, "tokenizer.ggml.scores");

  expect_error(llama_vocab(-4, -5, {1, 1}), "tokenizer.ggml.token_type");

  GgufWriter scores_wrong_type;
  scores_wrong_type.add_string("tokenizer.ggml.model", "llama");
  scores_wrong_type.add_string_array("tokenizer.ggml.tokens", {"a"});
  scores_wrong_type.add_string_array("tokenizer.ggml.scores", {"x"});
  expect_error(scores_wrong_type, "tokenizer.ggml.scores");

  GgufWriter bos_of_wrong_type = llama_vocab(-4, -5);
  bos_of_wrong_type.add_string("tokenizer.ggml.bos_token_id", "<s>");
  expect_error(bos_of_wrong_type, "tokenizer.ggml.bos_token_id");

  GgufWriter no_merges;
  no_merges.add_string("tokenizer.ggml.model", "gpt2");
  no_merges.add_string_array("tokenizer.ggml.tokens", {"a"});
  expect_error(no_merges, "tokenizer.ggml.merges");

  expect_error(gpt2_vocab("gpt-2", {"ab"}), "tokenizer.ggml.merges");
  expect_error(gpt2_vocab("gpt-2", {"a x"}), "\"a x\"");  // x is no token
}

}  // namespace
}  // namespace pagedserve::model
