// GGUF files (llama.cpp's single-file model format, versions 2 and 3): the header, the typed
// metadata, the tensor infos and the memory-mapped tensor data. Nothing is copied or converted
// here: metadata is parsed into GgufValue, tensors are views into the mapping. The file is
// untrusted input: every count, length, type and offset is checked before use, so a truncated
// or hostile file gives a ModelError naming the file and the problem, never an out-of-bounds
// read or an absurd allocation.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count,
// the metadata (string key, u32 value type, value), the tensor infos (string name, u32 n_dims,
// n_dims x u64 ne, u32 ggml type, u64 offset relative to the data section), padding to
// `general.alignment` (default 32), then the data section. A string is u64 length + bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/loader/mapped_file.h"
#include "model/loader/safetensors.h"

namespace pagedserve::model {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* gguf_type_name(GgufType type);  // "uint8", ..., "array"

// One metadata value. Scalars of every integer type are held widened (int64_t, or uint64_t for
// kUint64); arrays keep their element type and hold their elements (arrays of arrays allowed).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType element_type = GgufType::kUint8;  // for kArray
  std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<GgufValue>> value;
};

// ggml tensor types that matter to the loader; other numbers are kept as-is in GgufTensor.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};
// "F32", "Q4_K", ...; "type N" for a number it does not know.
std::string ggml_type_name(uint32_t type);
// Elements per block (1 for F32, F16, BF16, the integer types; 32 for Q4_0; 256 for Q4_K);
// nullopt for unknown types.
std::optional<int64_t> ggml_block_size(uint32_t type);
// Bytes of a row of `elements` values of `type` (block-quantized types: elements must be a
// multiple of the block size); nullopt for unknown types or a bad multiple.
std::optional<size_t> ggml_row_bytes(uint32_t type, int64_t elements);
// The loader's dtype of a ggml type the engine computes with; nullopt for the others (Q4_1,
// Q2_K, IQ*, ...).
std::optional<DType> dtype_of_ggml(uint32_t type);

struct GgufTensor {
  std::string name;
  uint32_t type = 0;                // a GgmlType value (maybe one this enum does not name)
  std::vector<int64_t> ne;          // ggml order: ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;              // within the data section
  const std::byte* data = nullptr;  // into the mapping
  size_t num_bytes = 0;

  // Row-major shape, outermost first (ne reversed): a Hugging Face Linear weight [out, in] is
  // stored with ne = {in, out} and has shape() = {out, in}.
  std::vector<int64_t> shape() const;
  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws ModelError "<path>: <problem>" for a missing file, a bad
  // magic, an unsupported version (only 2 and 3), a count, string or array length that cannot
  // fit in the file, an unknown value type, a duplicate key or tensor name, a tensor with zero
  // or more than 4 dimensions or a size that overflows, an unknown tensor type, a misaligned
  // offset, or tensor data running past the end of the file.
  static std::unique_ptr<GgufFile> open(const std::filesystem::path& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata by key (sorted by name; the file's order is not kept).
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters: nullopt when the key is absent; ModelError "<path>: metadata key <key> has
  // type <t>, expected <what>" when present with the wrong type. get_int accepts every integer
  // type (and a uint64 above INT64_MAX is an error); get_float accepts float32/float64 and the
  // integer types; arrays must have the matching element kind.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;

  const std::map<std::string, GgufTensor, std::less<>>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

  // A TensorView (row-major shape) of a tensor of a type dtype_of_ggml knows (quantized ones
  // keep ggml's block layout). Throws ModelError "<path>: tensor <name> has type Q4_1, ..."
  // for other types, naming the type.
  TensorView view(const GgufTensor& tensor) const;

 private:
  GgufFile() = default;
  std::filesystem::path path_;
  MappedFile mapping_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::map<std::string, GgufTensor, std::less<>> tensors_;
};

// Writes GGUF v3 files (make-model --format gguf, tests). Metadata and tensors are written in
// the order they are added; tensor data is aligned to `alignment` (a power of two), and
// general.alignment is written (as the first key) only when it is not the default 32. The add
// functions throw std::invalid_argument for what the reader would reject (a duplicate key or
// tensor name, a value whose variant or range does not match its type, a byte count that does
// not match the shape), so every written file reads back with GgufFile.
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  void add(std::string key, GgufValue value);
  // Convenience setters for the common kinds.
  void add_string(std::string key, std::string value);
  void add_uint32(std::string key, uint32_t value);
  void add_int32(std::string key, int32_t value);
  void add_float32(std::string key, float value);
  void add_bool(std::string key, bool value);
  void add_string_array(std::string key, const std::vector<std::string>& values);
  void add_float32_array(std::string key, const std::vector<float>& values);
  void add_int32_array(std::string key, const std::vector<int32_t>& values);
  // `shape` is row-major (outermost first); `bytes` must be exactly the tensor's size in
  // `type` (any type ggml_row_bytes knows; the innermost dimension must fill whole blocks).
  void add_tensor(std::string name, GgmlType type, const std::vector<int64_t>& shape,
                  std::vector<std::byte> bytes);
  // Throws std::runtime_error when the file cannot be written, std::invalid_argument for an
  // alignment that is not a power of two below 2^32.
  void write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace pagedserve::model
