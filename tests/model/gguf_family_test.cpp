// make-model's two formats of one spec (write_synthetic_model / write_synthetic_gguf), for
// every family: both load into LlamaModel and give the same logits over batches of 1..8
// sequences with chunked prefill, decode and sequences joining mid-run (block size 4, shuffled
// block tables), sequences longer than the sliding windows, norms jittered so every norm
// matters. The GGUF loader undoes what the converter did (Q/K permutation, Gemma's 1 + w,
// rope_freqs, longrope factors) and reads each family's switches from metadata; the Hugging
// Face loader reads them from config.json: any disagreement shows in the logits. And the folder
// itself is the family it claims to be: the engine on it matches HfReference
// (tests/model/family_reference.h, the transformers modeling code in double precision), which
// reads only config.json and the tensors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/llama_model.h"
#include "model/loader/llama_weights.h"
#include "model/loader/safetensors.h"
#include "model/synthetic_model.h"
#include "tests/model/family_reference.h"
#include "tests/model/gguf_family_util.h"

namespace pagedserve::model {
namespace {

using namespace gguf_family;

void expect_formats_agree(const SyntheticModelSpec& spec) {
  SCOPED_TRACE(std::string("--arch ") + synthetic_family_name(spec.family));
  const auto both = write_both(spec);
  const LlamaCheckpoint hf = open_llama_checkpoint(both->hf);
  const LlamaCheckpoint gguf = open_llama_checkpoint(both->gguf);
  expect_same_config(hf.config, gguf.config);
  if (::testing::Test::HasFailure()) return;
  const LlamaModel hf_model(hf, nullptr);
  const LlamaModel gguf_model(gguf, nullptr);
  for (int n = 1; n <= 8; ++n) {
    expect_same_logits(hf_model, gguf_model,
                       {.num_seqs = n, .min_len = 3, .max_len = 24, .seed = 31u * n + 7});
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(GgufFamily, LlamaFormatsGiveTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kLlama, 1));
}
// head_dim 12 and rope_theta 500000 put one frequency in each llama3 band (wavelengths 6.3 and
// 56 high, 4400 medium, 39000 and up low), so the rope_freqs tensor matters.
TEST(GgufFamily, Llama3RopeFreqsGiveTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kLlama3, 2));
}
TEST(GgufFamily, MistralSlidingWindowGivesTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kMistral, 3));
}
TEST(GgufFamily, Qwen2BiasesGiveTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kQwen2, 4));
}
TEST(GgufFamily, Qwen3QkNormGivesTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kQwen3, 5));
}
// max_position_embeddings 256 over an original 64: longrope factors and attn_factor in use.
TEST(GgufFamily, Phi3FusedLongRopeGivesTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kPhi3, 6));
}
TEST(GgufFamily, Gemma2SoftcapsGiveTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kGemma2, 7));
}
TEST(GgufFamily, Gemma3LocalGlobalGivesTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kGemma3, 8));
}
TEST(GgufFamily, SmolLM3NoRopeLayersGiveTheSameLogits) {
  expect_formats_agree(tiny_spec(SyntheticFamily::kSmolLM3, 9));
}
// 16-bit matrices with F32 norms and biases, as the converter writes an f16/bf16 model.
TEST(GgufFamily, SixteenBitFormatsGiveTheSameLogits) {
  for (const DType dtype : {DType::BF16, DType::F16}) {
    for (const SyntheticFamily family :
         {SyntheticFamily::kLlama, SyntheticFamily::kQwen2, SyntheticFamily::kPhi3}) {
      SyntheticModelSpec spec = tiny_spec(family, 10);
      spec.dtype = dtype;
      expect_formats_agree(spec);
    }
  }
}

// make-model's folder read back as the reference's HfModel: config.json and every tensor.
pagedserve::testing::HfModel read_folder(const std::filesystem::path& dir) {
  pagedserve::testing::HfModel m;
  std::ifstream config(dir / "config.json");
  m.config = nlohmann::json::parse(config);
  const auto file = SafetensorsFile::open(dir / "model.safetensors");
  for (const auto& [name, view] : file->tensors()) m.tensors[name] = {view.shape, to_f32(view)};
  return m;
}

constexpr double kReferenceTolerance = 1e-4;  // float32 engine against the double reference

void expect_folder_matches_reference(const SyntheticModelSpec& spec) {
  SCOPED_TRACE(std::string("--arch ") + synthetic_family_name(spec.family));
  TempDir dir;
  write_synthetic_model(dir.path(), spec);
  const pagedserve::testing::HfModel hf = read_folder(dir.path());
  const LlamaCheckpoint checkpoint = open_llama_checkpoint(dir.path());
  const LlamaModel model(checkpoint, nullptr);
  const Schedule schedule =
      make_schedule(spec.vocab_size, {.num_seqs = 3, .min_len = 3, .max_len = 24, .seed = 77});
  const auto logits_at = run(model, schedule);
  for (size_t i = 0; i < schedule.seqs.size(); ++i) {
    const std::vector<int32_t>& tokens = schedule.seqs[i].tokens;
    pagedserve::testing::HfReference reference(hf);
    size_t pos = 0;
    for (const int chunk : schedule.seqs[i].chunks) {  // the forward lengths transformers sees
      const int forward_length = static_cast<int>(pos) + chunk;
      for (int c = 0; c < chunk; ++c, ++pos) {
        const std::vector<double> want = reference.next(tokens[pos], forward_length);
        const auto it = logits_at.find({static_cast<int>(i), static_cast<int>(pos)});
        if (it == logits_at.end()) continue;  // inside a prefill chunk: no logits row
        double scale = 1.0;
        for (double w : want) scale = std::max(scale, std::abs(w));
        for (size_t v = 0; v < want.size(); ++v) {
          ASSERT_NEAR(it->second[v], want[v], kReferenceTolerance * scale)
              << "seq " << i << " pos " << pos << " logit " << v;
        }
      }
    }
  }
}

// Each family's folder against the transformers reference (sequences stay within Phi-3's
// original context, so short factors apply in both).
TEST(GgufFamily, EveryFamilyFolderMatchesTheTransformersReference) {
  for (int f = 0; f <= static_cast<int>(SyntheticFamily::kSmolLM3); ++f) {
    expect_folder_matches_reference(tiny_spec(static_cast<SyntheticFamily>(f), 70 + f));
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace pagedserve::model
