// `pagedserve make-model`: writes a random-weight Llama of a chosen shape in Hugging Face
// layout (see model/synthetic_model.h), for benchmarks and experiments that need a model of a
// given size rather than a trained one.
#include <chrono>
#include <iostream>
#include <stdexcept>

#include "model/synthetic_model.h"
#include "tools/cli_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kMakeModelHelp =
    "usage: pagedserve make-model --out DIR [options]\n"
    "  --hidden H       hidden size (default 768)\n"
    "  --layers L       decoder layers (default 12)\n"
    "  --heads N        attention heads (default 12)\n"
    "  --kv-heads N     key/value heads (default = heads)\n"
    "  --ffn F          MLP intermediate size (default 2048)\n"
    "  --vocab V        vocabulary size, tokenizer included (default 32000)\n"
    "  --context C      max_position_embeddings (default 4096)\n"
    "  --dtype D        f32, f16 or bf16 (default f32)\n"
    "  --seed S         weight seed; the same flags give the same bytes (default 0)\n";

model::DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") return model::DType::F32;
  if (text == "f16" || text == "float16") return model::DType::F16;
  if (text == "bf16" || text == "bfloat16") return model::DType::BF16;
  throw UsageError("--dtype must be f32, f16 or bf16, got '" + text + "'");
}

}  // namespace

int run_make_model(const std::vector<std::string>& args) {
  const CliFlags flags(
      args,
      {"out", "hidden", "layers", "heads", "kv-heads", "ffn", "vocab", "context", "dtype", "seed"},
      {"help"});
  if (flags.has("help")) {
    std::cout << kMakeModelHelp;
    return 0;
  }
  constexpr int64_t kMaxSize = 1 << 20;
  model::SyntheticModelSpec spec;
  spec.hidden_size = static_cast<int>(flags.get_int("hidden", 768, 1, kMaxSize));
  spec.num_layers = static_cast<int>(flags.get_int("layers", 12, 1, 4096));
  spec.num_heads = static_cast<int>(flags.get_int("heads", 12, 1, kMaxSize));
  spec.num_kv_heads = static_cast<int>(flags.get_int("kv-heads", spec.num_heads, 1, kMaxSize));
  spec.intermediate_size = static_cast<int>(flags.get_int("ffn", 2048, 1, kMaxSize));
  spec.vocab_size = static_cast<int>(flags.get_int("vocab", 32000, 258, 1 << 22));
  spec.max_position_embeddings = static_cast<int>(flags.get_int("context", 4096, 1, 1 << 24));
  spec.dtype = parse_dtype(flags.get("dtype", "f32"));
  spec.seed = static_cast<uint64_t>(flags.get_int("seed", 0, 0, INT64_MAX));
  try {
    model::validate(spec);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const std::string out = flags.require("out");
  const auto start = std::chrono::steady_clock::now();
  model::write_synthetic_model(out, spec);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "make-model: wrote " << out << " in " << seconds << " s\n";
  return 0;
}

}  // namespace pagedserve::tools
