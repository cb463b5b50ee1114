// `pagedserve make-model`: writes a random-weight model of a chosen family and shape, in
// Hugging Face layout or as one GGUF file (see model/synthetic_model.h), for benchmarks,
// experiments and tests that need a model of a given size rather than a trained one.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>

#include "model/quantize_gguf.h"
#include "model/synthetic_model.h"
#include "tools/cli_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kMakeModelHelp =
    "usage: pagedserve make-model --out PATH [options]\n"
    "  --arch A         family: llama, llama3, mistral, qwen2, qwen3, phi3, gemma2, gemma3,\n"
    "                   smollm3 (default llama)\n"
    "  --format F       hf: a Hugging Face folder PATH; gguf: one GGUF file PATH, as\n"
    "                   llama.cpp's converter writes it (default hf)\n"
    "  --hidden H       hidden size (default 768)\n"
    "  --layers L       decoder layers (default 12)\n"
    "  --heads N        attention heads (default 12)\n"
    "  --kv-heads N     key/value heads (default = heads)\n"
    "  --head-dim D     head size (default hidden / heads)\n"
    "  --ffn F          MLP intermediate size (default 2048)\n"
    "  --vocab V        vocabulary size, tokenizer included (default 32000)\n"
    "  --context C      max_position_embeddings (default 4096)\n"
    "  --sliding-window W  window of the sliding layers (mistral, phi3, gemma2/3; default 4096)\n"
    "  --norm-jitter J  norm weights 1 + uniform(+-J) instead of 1 (default 0)\n"
    "  --dtype D        f32, f16 or bf16 (default f32)\n"
    "  --seed S         weight seed; the same flags give the same weights in both formats\n"
    "                   and the same bytes (default 0)\n"
    "  --quant TYPE     (gguf) quantize the matrices as `pagedserve quantize` does: Q8_0,\n"
    "                   Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M (default none)\n";

model::DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") return model::DType::F32;
  if (text == "f16" || text == "float16") return model::DType::F16;
  if (text == "bf16" || text == "bfloat16") return model::DType::BF16;
  throw UsageError("--dtype must be f32, f16 or bf16, got '" + text + "'");
}

model::SyntheticModelSpec parse_spec(const CliFlags& flags) {
  constexpr int64_t kMaxSize = 1 << 20;
  model::SyntheticModelSpec spec;
  const std::string arch = flags.get("arch", "llama");
  const auto family = model::parse_synthetic_family(arch);
  if (!family) {
    throw UsageError("--arch must be one of " + model::synthetic_family_names() + ", got '" + arch +
                     "'");
  }
  spec.family = *family;
  spec.hidden_size = static_cast<int>(flags.get_int("hidden", 768, 1, kMaxSize));
  spec.num_layers = static_cast<int>(flags.get_int("layers", 12, 1, 4096));
  spec.num_heads = static_cast<int>(flags.get_int("heads", 12, 1, kMaxSize));
  spec.num_kv_heads = static_cast<int>(flags.get_int("kv-heads", spec.num_heads, 1, kMaxSize));
  spec.head_dim = static_cast<int>(flags.get_int("head-dim", 0, 0, kMaxSize));
  spec.intermediate_size = static_cast<int>(flags.get_int("ffn", 2048, 1, kMaxSize));
  spec.vocab_size = static_cast<int>(flags.get_int("vocab", 32000, 258, 1 << 22));
  spec.max_position_embeddings = static_cast<int>(flags.get_int("context", 4096, 1, 1 << 24));
  spec.sliding_window = static_cast<int>(flags.get_int("sliding-window", 4096, 1, 1 << 24));
  spec.norm_jitter = static_cast<float>(flags.get_double("norm-jitter", 0.0));
  spec.dtype = parse_dtype(flags.get("dtype", "f32"));
  spec.seed = static_cast<uint64_t>(flags.get_int("seed", 0, 0, INT64_MAX));
  try {
    model::validate(spec);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return spec;
}

}  // namespace

int run_make_model(const std::vector<std::string>& args) {
  const CliFlags flags(
      args,
      {"out", "arch", "format", "hidden", "layers", "heads", "kv-heads", "head-dim", "ffn", "vocab",
       "context", "sliding-window", "norm-jitter", "dtype", "seed", "quant"},
      {"help"});
  if (flags.has("help")) {
    std::cout << kMakeModelHelp;
    return 0;
  }
  const model::SyntheticModelSpec spec = parse_spec(flags);
  const std::string format = flags.get("format", "hf");
  if (format != "hf" && format != "gguf") {
    throw UsageError("--format must be hf or gguf, got '" + format + "'");
  }
  const std::string out = flags.require("out");
  std::optional<model::QuantizationPlan> plan;
  if (flags.has("quant")) {
    plan = model::parse_quantization_plan(flags.require("quant"));
    if (!plan) throw UsageError("--quant: unknown type '" + flags.require("quant") + "'");
    if (format != "gguf") throw UsageError("--quant needs --format gguf");
  }
  const auto start = std::chrono::steady_clock::now();
  if (plan) {  // written in the dtype, then quantized from it
    const std::filesystem::path unquantized = out + ".unquantized.tmp";
    model::write_synthetic_gguf(unquantized, spec);
    try {
      std::cerr << "make-model: " << model::quantize_gguf(unquantized, out, *plan) << "\n";
    } catch (...) {
      std::filesystem::remove(unquantized);
      throw;
    }
    std::filesystem::remove(unquantized);
  } else if (format == "gguf") {
    model::write_synthetic_gguf(out, spec);
  } else {
    model::write_synthetic_model(out, spec);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "make-model: wrote " << out << " in " << seconds << " s\n";
  return 0;
}

}  // namespace pagedserve::tools
