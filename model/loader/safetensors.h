// Memory-mapped safetensors files: one file, or a sharded set named by
// model.safetensors.index.json. Tensors are views into the mapping; nothing is copied until a
// caller converts a tensor to float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/loader/mapped_file.h"

namespace pagedserve::kernels {
enum class QuantType : uint8_t;  // kernels/cpu/quant.h
}  // namespace pagedserve::kernels

namespace pagedserve::model {

// Element types of weights. F32, F16 and BF16 come from safetensors and GGUF; the block-quantized
// types (llama.cpp's, kernels/cpu/quant.h) only from GGUF, and a view of one holds whole rows of
// blocks in ggml's layout.
enum class DType { F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };

const char* dtype_name(DType dtype);  // "F32", "F16", "BF16", "Q8_0", ...
// "float32", "float16", "bfloat16": config.json's torch_dtype for weights of that dtype
// (float16 for the quantized types, whose activations and KV cache llama.cpp keeps in F16).
const char* torch_dtype_name(DType dtype);
// Bytes per element; 0 for the block-quantized types (see tensor_bytes).
size_t dtype_size(DType dtype);
bool is_quantized(DType dtype);
// Bytes of a tensor of `shape` (row-major, innermost last) in `dtype`; nullopt when it
// overflows, or when a quantized tensor's rows do not fill whole blocks.
std::optional<uint64_t> tensor_bytes(DType dtype, const std::vector<int64_t>& shape);
// The kernels' name of a quantized dtype (nullopt for F32, F16, BF16), and back.
std::optional<kernels::QuantType> quant_type_of(DType dtype);
DType dtype_of(kernels::QuantType type);

// A tensor inside a mapped file. Valid while its SafetensorsFile/WeightStore lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t num_bytes = 0;
  std::filesystem::path file;  // which file holds it, for error messages

  int64_t num_elements() const;
};

// Converts any supported dtype to float32 (F16 and BF16 widened exactly, quantized blocks
// dequantized as ggml does).
std::vector<float> to_f32(const TensorView& tensor);
// Rows [first_row, first_row + rows) of it (a row: the last dimension) into out, converted as
// to_f32 does; throws ModelError for rows outside the tensor. Safe to call from several threads.
void to_f32_rows(const TensorView& tensor, int64_t first_row, int64_t rows, float* out);

// One mmapped .safetensors file. Throws ModelError naming the file when the file is missing,
// shorter than its header, has a header that is not JSON or not the safetensors schema, uses an
// unsupported dtype, or has offsets that overlap, leave gaps or run past the end of the file,
// or a shape whose element count does not match its byte range.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  MappedFile mapping_;
  std::map<std::string, TensorView> tensors_;
};

// All the weights of a model directory: model.safetensors, or the shards listed in
// model.safetensors.index.json (weight_map). Throws ModelError when neither exists, the index
// is invalid, or a shard is missing or lacks a tensor the index promised.
class WeightStore {
 public:
  static WeightStore open(const std::filesystem::path& model_dir);

  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  // Throws ModelError "<file>: missing tensor <name>" (file = the model file or index) when
  // absent, or "<file>: tensor <name> has shape [..], expected [..]" on a shape mismatch.
  const TensorView& require(const std::string& name, const std::vector<int64_t>& shape) const;

  const std::filesystem::path& source() const { return source_; }  // file or index path

 private:
  std::filesystem::path source_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace pagedserve::model
