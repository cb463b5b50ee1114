// quantize_gguf: llama-quantize's job for the types the CPU kernels compute with.
#include "model/quantize_gguf.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <sstream>
#include <vector>

#include "model/linear_weight.h"
#include "model/loader/gguf.h"
#include "model/loader/model_error.h"

namespace pagedserve::model {

namespace {

using kernels::QuantType;

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
bool uses_more_bits(int layer, int num_layers) {
  return layer < num_layers / 8 || layer >= 7 * num_layers / 8 || (layer - num_layers / 8) % 3 == 2;
}

// Layer N of "blk.N.<rest>", or -1.
int layer_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  int layer = -1;
  const char* begin = name.data() + 4;
  const auto [end, error] = std::from_chars(begin, name.data() + name.size(), layer);
  return error == std::errc() && end != begin ? layer : -1;
}

GgmlType ggml_type_of(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:
      return GgmlType::kQ8_0;
    case QuantType::kQ4_0:
      return GgmlType::kQ4_0;
    case QuantType::kQ5_0:
      return GgmlType::kQ5_0;
    case QuantType::kQ5_1:
      return GgmlType::kQ5_1;
    case QuantType::kQ4_K:
      return GgmlType::kQ4_K;
    case QuantType::kQ5_K:
      return GgmlType::kQ5_K;
    case QuantType::kQ6_K:
      break;
  }
  return GgmlType::kQ6_K;
}

}  // namespace

std::optional<QuantizationPlan> parse_quantization_plan(std::string_view name) {
  struct Known {
    const char* name;
    QuantType base;
    bool mixed_k;
    uint32_t file_type;
  };
  static constexpr Known kKnown[] = {
      {"Q8_0", QuantType::kQ8_0, false, 7},    {"Q4_0", QuantType::kQ4_0, false, 2},
      {"Q5_0", QuantType::kQ5_0, false, 8},    {"Q5_1", QuantType::kQ5_1, false, 9},
      {"Q4_K", QuantType::kQ4_K, false, 14},   {"Q4_K_S", QuantType::kQ4_K, false, 14},
      {"Q4_K_M", QuantType::kQ4_K, true, 15},  {"Q5_K", QuantType::kQ5_K, false, 16},
      {"Q5_K_S", QuantType::kQ5_K, false, 16}, {"Q5_K_M", QuantType::kQ5_K, true, 17},
      {"Q6_K", QuantType::kQ6_K, false, 18},
  };
  const std::string wanted = upper(name);
  for (const Known& known : kKnown) {
    if (wanted == known.name)
      return QuantizationPlan{wanted, known.base, known.mixed_k, known.file_type};
  }
  return std::nullopt;
}

std::optional<QuantType> QuantizationPlan::type_for(std::string_view name, int layer,
                                                    int num_layers, int64_t cols) const {
  QuantType type = base;
  if (name == "output.weight") {
    // llama.cpp keeps the output projection at 6 bits or more: the logits show every error.
    type = base == QuantType::kQ8_0 ? QuantType::kQ8_0 : QuantType::kQ6_K;
  } else if (mixed_k && layer >= 0 && uses_more_bits(layer, num_layers) &&
             (ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight"))) {
    type = QuantType::kQ6_K;
  }
  return quantization_for_width(type, static_cast<int>(cols));
}

std::string quantize_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                          const QuantizationPlan& plan) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(in);
  const std::optional<std::string> arch = file->get_string("general.architecture");
  if (!arch) throw ModelError(in.string() + ": not a GGUF model (no general.architecture)");
  const int num_layers = static_cast<int>(file->get_int(*arch + ".block_count").value_or(0));
  if (file->tensors().empty()) throw ModelError(in.string() + ": the file holds no tensors");

  GgufWriter writer(file->alignment());
  for (const auto& [key, value] : file->metadata()) {
    if (key == "general.file_type" || key == "general.quantization_version" ||
        key == "general.alignment") {
      continue;
    }
    writer.add(key, value);
  }
  writer.add_uint32("general.file_type", plan.llama_file_type);
  writer.add_uint32("general.quantization_version", 2);

  std::map<std::string, int> tensors_per_type;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  for (const auto& [name, tensor] : file->tensors()) {
    const TensorView view = file->view(tensor);
    if (is_quantized(view.dtype)) {
      throw ModelError(in.string() + ": tensor " + name + " is already " + dtype_name(view.dtype) +
                       "; quantize from an F32, F16 or BF16 file");
    }
    const std::optional<QuantType> type =
        view.shape.size() == 2 ? plan.type_for(name, layer_of(name), num_layers, view.shape[1])
                               : std::nullopt;
    bytes_in += view.num_bytes;
    if (!type) {
      writer.add_tensor(name, static_cast<GgmlType>(tensor.type), view.shape,
                        std::vector<std::byte>(view.data, view.data + view.num_bytes));
      ++tensors_per_type[dtype_name(view.dtype)];
      bytes_out += view.num_bytes;
      continue;
    }
    const std::vector<float> values = to_f32(view);
    const int64_t rows = view.shape[0];
    const int64_t cols = view.shape[1];
    const size_t row_bytes = kernels::quant_row_bytes(*type, cols);
    std::vector<std::byte> bytes(static_cast<size_t>(rows) * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      kernels::quantize_row(*type, values.data() + r * cols, bytes.data() + r * row_bytes, cols);
    }
    bytes_out += bytes.size();
    writer.add_tensor(name, ggml_type_of(*type), view.shape, std::move(bytes));
    ++tensors_per_type[kernels::quant_type_name(*type)];
  }
  writer.write(out);

  std::ostringstream summary;
  summary << out.string() << ": " << plan.name << ",";
  for (const auto& [type, count] : tensors_per_type) summary << " " << count << " " << type;
  summary << " tensors; " << bytes_in / 1e6 << " MB -> " << bytes_out / 1e6 << " MB";
  return summary.str();
}

}  // namespace pagedserve::model
