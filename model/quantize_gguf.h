// Quantizing a GGUF file, as llama.cpp's llama-quantize does: the matrices of an F32/F16/BF16
// GGUF rewritten in a block-quantized type, every other tensor and all metadata copied. The
// result reads back in llama.cpp and here (`pagedserve quantize`, `make-model --quant`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/cpu/quant.h"

namespace pagedserve::model {

// A file type, as llama-quantize names them: one type for every matrix ("Q8_0", "Q4_0",
// "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"), or a mix ("Q4_K_M", "Q5_K_M": attn_v and ffn_down
// of the first and last eighth of the layers and every third layer between them one step up,
// in Q6_K; the others in Q4_K / Q5_K).
struct QuantizationPlan {
  std::string name;  // as given, upper case
  kernels::QuantType base = kernels::QuantType::kQ8_0;
  bool mixed_k = false;          // the _M mixes
  uint32_t llama_file_type = 7;  // general.file_type (llama.cpp's LLAMA_FTYPE_MOSTLY_*)

  // The type of tensor `name` ([rows, cols]; layer `layer` of `num_layers`, -1 when not a
  // layer's) or nullopt to keep it as stored: 1-D tensors, and widths that fill no block.
  std::optional<kernels::QuantType> type_for(std::string_view name, int layer, int num_layers,
                                             int64_t cols) const;
};

// nullopt for a name it does not know (case-insensitive).
std::optional<QuantizationPlan> parse_quantization_plan(std::string_view name);

// Writes `out`: `in` with its matrices quantized per `plan`. Throws ModelError for an input
// that is not a GGUF model or already holds quantized matrices, std::runtime_error when out
// cannot be written. Returns a one-line summary (tensors per type, bytes before and after).
std::string quantize_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                          const QuantizationPlan& plan);

}  // namespace pagedserve::model
