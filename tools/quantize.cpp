// `pagedserve quantize IN OUT --type TYPE`: llama-quantize for the types this engine computes
// with (model/quantize_gguf.h); the output reads back in llama.cpp too.
#include <iostream>

#include "model/quantize_gguf.h"
#include "tools/cli_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {

namespace {

const char* const kQuantizeHelp =
    "usage: pagedserve quantize IN.gguf OUT.gguf --type TYPE\n"
    "  --type TYPE   Q8_0, Q4_0, Q5_0, Q5_1, Q4_K (= Q4_K_S), Q5_K (= Q5_K_S), Q6_K, or the\n"
    "                mixes Q4_K_M and Q5_K_M (attn_v and ffn_down of some layers in Q6_K)\n"
    "IN must hold F32, F16 or BF16 matrices (a converter's output); 1-D tensors and matrices\n"
    "whose width fills no block are copied as they are, the output projection is kept at 6 bits\n"
    "(Q6_K) or more, and all metadata is copied.\n";

}  // namespace

int run_quantize(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::vector<std::string> flag_args;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].starts_with("--")) {
      flag_args.push_back(args[i]);
      if (args[i] == "--type" && i + 1 < args.size()) flag_args.push_back(args[++i]);
    } else {
      paths.push_back(args[i]);
    }
  }
  const CliFlags flags(flag_args, {"type"}, {"help"});
  if (flags.has("help")) {
    std::cout << kQuantizeHelp;
    return 0;
  }
  if (paths.size() != 2)
    throw UsageError("expected IN.gguf and OUT.gguf\n" + std::string(kQuantizeHelp));
  const std::string type = flags.require("type");
  const std::optional<model::QuantizationPlan> plan = model::parse_quantization_plan(type);
  if (!plan) throw UsageError("--type: unknown type '" + type + "'\n" + kQuantizeHelp);
  std::cerr << "quantize: " << model::quantize_gguf(paths[0], paths[1], *plan) << "\n";
  return 0;
}

}  // namespace pagedserve::tools
