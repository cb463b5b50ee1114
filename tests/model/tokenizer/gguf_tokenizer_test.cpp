// Tokenizer::from_gguf: the real vocabularies in ../shared/tokenizers/gguf against the ids
// Hugging Face produced for llama.cpp's tokenizer test inputs; the SentencePiece GGUF against
// the Hugging Face tokenizer.json of the same vocabulary; merge order from scores on a
// hand-built vocabulary; and bad metadata.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "model/loader/gguf.h"
#include "model/loader/model_error.h"
#include "tests/model/tokenizer/test_tokenizers.h"

namespace pagedserve::model::testing {
namespace {

std::filesystem::path gguf_dir() { return tokenizers_dir() / "gguf"; }

Tokenizer load_gguf(const std::filesystem::path& path) {
  return Tokenizer::from_gguf(*GgufFile::open(path));
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct TestVector {
  std::string text;
  std::vector<int32_t> ids;
};

// The README's format: inputs separated by "\n__ggml_vocab_test__\n" (the last one followed by
// a final separator line), one line of space-separated ids per input.
std::vector<TestVector> read_test_vectors(const std::filesystem::path& gguf) {
  const std::string inputs = read_file(gguf.string() + ".inp");
  const std::string outputs = read_file(gguf.string() + ".out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<TestVector> vectors;
  for (size_t pos = 0; pos < inputs.size();) {
    const size_t end = inputs.find(separator, pos);
    if (end == std::string::npos) break;
    vectors.push_back({inputs.substr(pos, end - pos), {}});
    pos = end + separator.size();
  }
  std::istringstream lines(outputs);
  std::string line;
  for (TestVector& vector : vectors) {
    EXPECT_TRUE(std::getline(lines, line)) << "fewer .out lines than inputs in " << gguf;
    std::istringstream numbers(line);
    for (int32_t id; numbers >> id;) vector.ids.push_back(id);
  }
  return vectors;
}

void expect_test_vectors(const std::string& name) {
  const std::filesystem::path path = gguf_dir() / ("ggml-vocab-" + name + ".gguf");
  const Tokenizer tokenizer = load_gguf(path);
  const std::vector<TestVector> vectors = read_test_vectors(path);
  EXPECT_GT(vectors.size(), 30u);
  for (const TestVector& vector : vectors) {
    SCOPED_TRACE(name + ": \"" + vector.text + "\"");
    const std::vector<int32_t> ids = tokenizer.encode(vector.text, false);
    EXPECT_EQ(ids, vector.ids);
    EXPECT_EQ(tokenizer.decode(ids, false, /*cleanup=*/false), vector.text);
  }
}

TEST(GgufTokenizer, LlamaSpmTestVectors) { expect_test_vectors("llama-spm"); }
TEST(GgufTokenizer, StarcoderTestVectors) { expect_test_vectors("starcoder"); }
TEST(GgufTokenizer, DeepseekCoderTestVectors) { expect_test_vectors("deepseek-coder"); }
TEST(GgufTokenizer, DeepseekLlmTestVectors) { expect_test_vectors("deepseek-llm"); }

// The same Llama 2 vocabulary from GGUF (scores) and from Hugging Face's tokenizer.json
// (merges) tokenizes alike. Left out: texts spelling <s> etc. (the tokenizer.json marks them
// normalized, matched only after a "▁"; GGUF control tokens match anywhere) and texts with
// U+00A0, because that tokenizer.json's piece 30081 is " " where the GGUF (and SentencePiece's
// model) has U+00A0.
TEST(GgufTokenizer, LlamaSpmMatchesHuggingFaceLlama2) {
  const Tokenizer gguf = load_gguf(gguf_dir() / "ggml-vocab-llama-spm.gguf");
  const Tokenizer& hf = llama2_tokenizer();
  std::vector<std::string> texts;
  for (const nlohmann::json& line : read_jsonl(tokenizers_dir() / "llama2" / "golden.jsonl")) {
    texts.push_back(line.at("text").get<std::string>());
  }
  for (const TestVector& v : read_test_vectors(gguf_dir() / "ggml-vocab-llama-spm.gguf")) {
    texts.push_back(v.text);
  }
  size_t compared = 0;
  for (const std::string& text : texts) {
    if (text.find("<s>") != std::string::npos || text.find("</s>") != std::string::npos ||
        text.find("<unk>") != std::string::npos || text.find("\u00a0") != std::string::npos) {
      continue;
    }
    SCOPED_TRACE(text);
    EXPECT_EQ(gguf.encode(text, true), hf.encode(text, true));
    EXPECT_EQ(gguf.encode(text, false), hf.encode(text, false));
    const std::vector<int32_t> ids = hf.encode(text, true);
    EXPECT_EQ(gguf.decode(ids, false), hf.decode(ids, false));
    EXPECT_EQ(gguf.decode(ids, true), hf.decode(ids, true));
    ++compared;
  }
  EXPECT_GT(compared, 60u);
  EXPECT_EQ(gguf.id_to_token(30081), "\u00a0");
  EXPECT_EQ(hf.id_to_token(30081), " ");
  EXPECT_EQ(gguf.vocab_size(), hf.vocab_size());
  EXPECT_EQ(gguf.bos_token_id(), hf.bos_token_id());
  EXPECT_EQ(gguf.eos_token_id(), hf.eos_token_id());
  for (const int32_t id : {0, 1, 2, 3, 13, 259, 29871, 31999}) {
    EXPECT_EQ(gguf.id_to_token(id), hf.id_to_token(id)) << id;
    EXPECT_EQ(gguf.is_special(id), hf.is_special(id)) << id;
  }
}

// stories260K's GGUF and its Hugging Face folder: the same 512-piece vocabulary, special
// tokens (normalized=false in that tokenizer.json, like GGUF's control tokens) included.
TEST(GgufTokenizer, Stories260KGgufMatchesFolder) {
  const Tokenizer gguf =
      load_gguf(pagedserve::testing::shared_dir() / "models" / "stories260K.gguf");
  const Tokenizer& hf = stories260k_tokenizer();
  for (const std::string text :
       {"Once upon a time", " Lily and Tom went to the park.\n\"Look!\" she said.",
        "<s>Hello</s> world<unk>", "  two  spaces\t\ttabs", "caf\u00e9 \u4f60\u597d 123", ""}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(gguf.encode(text, true), hf.encode(text, true));
    EXPECT_EQ(gguf.encode(text, false), hf.encode(text, false));
    const std::vector<int32_t> ids = hf.encode(text, true);
    EXPECT_EQ(gguf.decode(ids, false), hf.decode(ids, false));
    EXPECT_EQ(gguf.decode(ids, true), hf.decode(ids, true));
  }
  EXPECT_EQ(gguf.encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
}

}  // namespace
}  // namespace pagedserve::model::testing
