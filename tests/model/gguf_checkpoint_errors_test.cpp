// open_llama_checkpoint on bad GGUF model files: each is refused with a ModelError naming the
// file and what is wrong (the architecture and the supported ones, the missing tensor, the
// metadata key of the wrong type, the quantized tensor and its type), never a crash or a model
// that loads wrong. The files are make-model's GGUF output copied with one edit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "model/loader/gguf.h"
#include "model/loader/llama_weights.h"
#include "model/loader/model_error.h"
#include "model/synthetic_model.h"
#include "tests/model/loader/loader_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

SyntheticModelSpec small_llama() {
  SyntheticModelSpec s;
  s.hidden_size = 64;  // a multiple of Q8_0's 32-element blocks
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.intermediate_size = 96;
  s.vocab_size = 300;
  s.max_position_embeddings = 128;
  return s;
}

// What a copy may change: metadata (drop or replace a value) and tensors.
struct Edits {
  std::function<bool(const std::string& key, GgufValue& value)> metadata = {};  // false: drop
  std::function<bool(const GgufTensor& tensor, GgufWriter& out)> tensor = {};   // true: handled
};

// Copies `from` into `to` through `edits`.
void copy_gguf(const std::filesystem::path& from, const std::filesystem::path& to,
               const Edits& edits) {
  const auto file = GgufFile::open(from);
  GgufWriter out(file->alignment());
  for (const auto& [key, original] : file->metadata()) {
    GgufValue value = original;
    if (edits.metadata && !edits.metadata(key, value)) continue;
    out.add(key, value);
  }
  for (const auto& [name, tensor] : file->tensors()) {
    if (edits.tensor && edits.tensor(tensor, out)) continue;
    out.add_tensor(name, static_cast<GgmlType>(tensor.type), tensor.shape(),
                   std::vector<std::byte>(tensor.data, tensor.data + tensor.num_bytes));
  }
  out.write(to);
}

// The message of the ModelError open_llama_checkpoint throws for `path` (checked to name it).
std::string load_error(const std::filesystem::path& path) {
  try {
    (void)open_llama_checkpoint(path);
  } catch (const ModelError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr(path.string()));
    return message;
  }
  ADD_FAILURE() << path << " loaded";
  return "";
}

class GgufCheckpointErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    good_ = dir_.path() / "good.gguf";
    bad_ = dir_.path() / "bad.gguf";
    write_synthetic_gguf(good_, small_llama());
  }
  TempDir dir_;
  std::filesystem::path good_, bad_;
};

TEST_F(GgufCheckpointErrors, TheUnchangedCopyLoads) {
  copy_gguf(good_, bad_, {});
  const LlamaCheckpoint checkpoint = open_llama_checkpoint(bad_);
  EXPECT_EQ(checkpoint.config.num_hidden_layers, 2);
}

TEST_F(GgufCheckpointErrors, UnknownArchitectureIsNamedWithTheSupportedOnes) {
  copy_gguf(good_, bad_, {.metadata = [](const std::string& key, GgufValue& value) {
              if (key == "general.architecture") value.value = std::string("mamba");
              return true;
            }});
  const std::string message = load_error(bad_);
  EXPECT_THAT(message, HasSubstr("general.architecture 'mamba'"));
  for (const char* arch : {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "smollm3"}) {
    EXPECT_THAT(message, HasSubstr(arch));
  }
}

TEST_F(GgufCheckpointErrors, MissingTensorIsNamed) {
  copy_gguf(good_, bad_, {.tensor = [](const GgufTensor& tensor, GgufWriter&) {
              return tensor.name == "blk.1.ffn_down.weight";  // dropped
            }});
  EXPECT_THAT(load_error(bad_), HasSubstr("missing tensor blk.1.ffn_down.weight"));
}

TEST_F(GgufCheckpointErrors, MetadataKeyOfTheWrongTypeIsNamed) {
  copy_gguf(good_, bad_, {.metadata = [](const std::string& key, GgufValue& value) {
              if (key == "llama.block_count") {
                value.type = GgufType::kString;
                value.value = std::string("two");
              }
              return true;
            }});
  const std::string message = load_error(bad_);
  EXPECT_THAT(message, HasSubstr("llama.block_count"));
  EXPECT_THAT(message, HasSubstr("string"));
}

TEST_F(GgufCheckpointErrors, MissingRequiredMetadataKeyIsNamed) {
  copy_gguf(good_, bad_, {.metadata = [](const std::string& key, GgufValue&) {
              return key != "llama.embedding_length";
            }});
  EXPECT_THAT(load_error(bad_), HasSubstr("llama.embedding_length"));
}

// Q4_1 (not computed by this engine): blocks of 32 values stored as an f16 scale, an f16
// minimum and 16 bytes of nibbles, 20 bytes.
TEST_F(GgufCheckpointErrors, QuantizedTensorOfAnUnsupportedTypeIsRefusedNamingItAndItsType) {
  copy_gguf(good_, bad_, {.tensor = [](const GgufTensor& tensor, GgufWriter& out) {
              if (tensor.name != "blk.0.attn_q.weight") return false;
              const std::vector<int64_t> shape = tensor.shape();
              EXPECT_EQ(shape[1] % 32, 0);
              const size_t bytes = static_cast<size_t>(shape[0] * (shape[1] / 32) * 20);
              std::vector<std::byte> blocks(bytes, std::byte{0});
              out.add_tensor(tensor.name, GgmlType::kQ4_1, shape, std::move(blocks));
              return true;
            }});
  const std::string message = load_error(bad_);
  EXPECT_THAT(message, HasSubstr("blk.0.attn_q.weight"));
  EXPECT_THAT(message, HasSubstr("Q4_1"));
}

TEST_F(GgufCheckpointErrors, TruncatedFileIsNamed) {
  const auto size = std::filesystem::file_size(good_);
  for (const auto keep : {size - 1, size / 2, uintmax_t{100}}) {
    std::filesystem::copy_file(good_, bad_, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(bad_, keep);
    SCOPED_TRACE("kept " + std::to_string(keep) + " of " + std::to_string(size) + " bytes");
    EXPECT_FALSE(load_error(bad_).empty());
  }
}

// A vocabulary-only file (what `tokenize` reads) is not a model: say so, not "missing tensor".
TEST(GgufCheckpointVocabularyOnly, IsRefusedAsHoldingNoWeights) {
  const std::filesystem::path vocab =
      pagedserve::testing::shared_dir() / "tokenizers" / "gguf" / "ggml-vocab-llama-spm.gguf";
  try {
    open_llama_checkpoint(vocab);
    ADD_FAILURE() << "a vocabulary-only GGUF loaded as a model";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr(vocab.string()));
    EXPECT_THAT(e.what(), HasSubstr("holds no tensors"));
  }
}

}  // namespace
}  // namespace pagedserve::model
