// The GGUF reader: GgufFile::open, the tensor infos and view() (see gguf.h; the typed getters
// are in gguf_metadata.cpp, the ggml type table in ggml_types.cpp). The file is untrusted input:
// ByteReader checks every read against the bytes left in the mapping, and every count or length is
// checked against those bytes before anything is allocated, so a truncated or hostile file yields a
// ModelError and never an out-of-bounds read or an absurd allocation.
#include "model/loader/gguf.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "model/loader/mapped_file.h"
#include "model/loader/model_error.h"
#include "model/loader/shape_string.h"

namespace pagedserve::model {

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
// Real files nest no arrays at all; a small bound keeps hostile nesting from exhausting the
// stack through the recursive value parser.
constexpr int kMaxArrayDepth = 8;
// magic + version + tensor_count + metadata_kv_count
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
// Smallest possible metadata entry (empty key, type, a uint8) and tensor info (empty name,
// n_dims, one dimension, type, offset): used to reject counts that cannot fit in the file.
constexpr uint64_t kMinMetadataEntryBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& problem) {
  throw ModelError(path.string() + ": " + problem);
}

// Sequential little-endian reads from the mapping; each read is bounds-checked and a failure
// names the item being read (`context_`, e.g. the metadata key) and the offset.
class ByteReader {
 public:
  ByteReader(const std::filesystem::path& path, const std::byte* base, uint64_t size)
      : path_(path), base_(base), size_(size) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }

  [[noreturn]] void fail_here(const std::string& problem) const {
    fail(path_, context_.empty() ? problem : context_ + ": " + problem);
  }

  const std::byte* take(uint64_t bytes, const char* what) {
    if (bytes > remaining()) {
      fail_here(std::string("truncated file: ") + what + " needs " + std::to_string(bytes) +
                " bytes at offset " + std::to_string(offset_) + " but only " +
                std::to_string(remaining()) + " remain");
    }
    const std::byte* p = base_ + offset_;
    offset_ += bytes;
    return p;
  }

  uint64_t le(int bytes, const char* what) {
    const std::byte* p = take(static_cast<uint64_t>(bytes), what);
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | std::to_integer<uint64_t>(p[i]);
    return value;
  }
  uint8_t u8(const char* what) { return static_cast<uint8_t>(le(1, what)); }
  uint16_t u16(const char* what) { return static_cast<uint16_t>(le(2, what)); }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(le(4, what)); }
  uint64_t u64(const char* what) { return le(8, what); }

  // u64 length + bytes; the length is checked against the file before the string exists.
  std::string string(const char* what) {
    const uint64_t length = u64(what);
    const std::byte* p = take(length, what);
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(length));
  }

 private:
  const std::filesystem::path& path_;
  const std::byte* base_;
  uint64_t size_;
  uint64_t offset_ = 0;
  std::string context_;
};

// Bytes the smallest value of `type` occupies, or 0 for a number that is no GGUF type.
uint64_t min_value_bytes(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:  // the length
      return 8;
    case GgufType::kArray:  // element type + count
      return 12;
  }
  return 0;
}

GgufType checked_value_type(ByteReader& in, uint32_t type, const char* what) {
  if (min_value_bytes(type) == 0) {
    in.fail_here(std::string("unknown ") + what + " " + std::to_string(type) +
                 " (GGUF value types are 0..12)");
  }
  return static_cast<GgufType>(type);
}

GgufValue read_value(ByteReader& in, GgufType type, int depth);

GgufValue read_array(ByteReader& in, int depth) {
  if (depth >= kMaxArrayDepth) {
    in.fail_here("arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
  }
  GgufValue array;
  array.type = GgufType::kArray;
  array.element_type = checked_value_type(in, in.u32("array element type"), "array element type");
  const uint64_t count = in.u64("array length");
  const uint64_t element_bytes = min_value_bytes(static_cast<uint32_t>(array.element_type));
  if (count > in.remaining() / element_bytes) {
    in.fail_here("array of " + std::to_string(count) + " " + gguf_type_name(array.element_type) +
                 " values cannot fit in the " + std::to_string(in.remaining()) +
                 " bytes left in the file");
  }
  std::vector<GgufValue> elements;
  elements.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i)
    elements.push_back(read_value(in, array.element_type, depth + 1));
  array.value = std::move(elements);
  return array;
}

GgufValue read_value(ByteReader& in, GgufType type, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kUint8:
      v.value = int64_t{in.u8("uint8 value")};
      break;
    case GgufType::kInt8:
      v.value = int64_t{static_cast<int8_t>(in.u8("int8 value"))};
      break;
    case GgufType::kUint16:
      v.value = int64_t{in.u16("uint16 value")};
      break;
    case GgufType::kInt16:
      v.value = int64_t{static_cast<int16_t>(in.u16("int16 value"))};
      break;
    case GgufType::kUint32:
      v.value = int64_t{in.u32("uint32 value")};
      break;
    case GgufType::kInt32:
      v.value = int64_t{static_cast<int32_t>(in.u32("int32 value"))};
      break;
    case GgufType::kUint64:
      v.value = in.u64("uint64 value");
      break;
    case GgufType::kInt64:
      v.value = static_cast<int64_t>(in.u64("int64 value"));
      break;
    case GgufType::kFloat32:
      v.value = double{std::bit_cast<float>(in.u32("float32 value"))};
      break;
    case GgufType::kFloat64:
      v.value = std::bit_cast<double>(in.u64("float64 value"));
      break;
    case GgufType::kBool: {
      const uint8_t byte = in.u8("bool value");
      if (byte > 1) in.fail_here("bool value " + std::to_string(byte) + " is neither 0 nor 1");
      v.value = byte == 1;
      break;
    }
    case GgufType::kString:
      v.value = in.string("string");
      break;
    case GgufType::kArray:
      return read_array(in, depth);
  }
  return v;
}

// Validates general.alignment: a uint32 power of two (what llama.cpp accepts).
uint64_t alignment_from(ByteReader& in, const GgufValue& value) {
  if (value.type != GgufType::kUint32) {
    in.fail_here(std::string("has type ") + gguf_type_name(value.type) + ", expected uint32");
  }
  const auto alignment = static_cast<uint64_t>(std::get<int64_t>(value.value));
  if (!std::has_single_bit(alignment)) {
    in.fail_here("alignment " + std::to_string(alignment) + " is not a power of two");
  }
  return alignment;
}

// Reads one tensor info: name, dims, type, offset; checks dims and type and computes the size.
GgufTensor read_tensor_info(ByteReader& in) {
  GgufTensor t;
  t.name = in.string("tensor name");
  in.set_context(in.context() + " (" + t.name + ")");
  const uint32_t n_dims = in.u32("tensor dimension count");
  if (n_dims == 0 || n_dims > kMaxDims) {
    in.fail_here("has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
  }
  uint64_t rows = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t size = in.u64("tensor dimension");
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      in.fail_here("dimension " + std::to_string(d) + " is " + std::to_string(size) +
                   " (above INT64_MAX)");
    }
    t.ne.push_back(static_cast<int64_t>(size));
    if (d > 0) overflow = overflow || __builtin_mul_overflow(rows, size, &rows);
  }
  t.type = in.u32("tensor type");
  const std::optional<int64_t> block = ggml_block_size(t.type);
  if (!block) in.fail_here("unknown ggml tensor type " + std::to_string(t.type));
  if (t.ne[0] % *block != 0) {
    in.fail_here("ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of " +
                 ggml_type_name(t.type) + "'s block size " + std::to_string(*block));
  }
  const std::optional<size_t> row_bytes = ggml_row_bytes(t.type, t.ne[0]);
  uint64_t bytes = 0;
  overflow = overflow || !row_bytes || __builtin_mul_overflow(*row_bytes, rows, &bytes) ||
             bytes > std::numeric_limits<size_t>::max();
  int64_t elements = 1;  // also bounds num_elements(), which callers use unchecked
  for (int64_t dim : t.ne) overflow = overflow || __builtin_mul_overflow(elements, dim, &elements);
  if (overflow) in.fail_here("shape " + detail::shape_string(t.shape()) + " overflows its size");
  t.num_bytes = static_cast<size_t>(bytes);
  t.offset = in.u64("tensor data offset");
  return t;
}

void parse_metadata(ByteReader& in, uint64_t count,
                    std::map<std::string, GgufValue, std::less<>>& metadata, uint64_t& alignment) {
  if (count > in.remaining() / kMinMetadataEntryBytes) {
    in.fail_here("metadata count " + std::to_string(count) + " cannot fit in the " +
                 std::to_string(in.remaining()) + " bytes left in the file");
  }
  for (uint64_t i = 0; i < count; ++i) {
    in.set_context("metadata entry " + std::to_string(i));
    std::string key = in.string("metadata key");
    in.set_context("metadata key " + key);
    const GgufType type = checked_value_type(in, in.u32("value type"), "value type");
    GgufValue value = read_value(in, type, 0);
    if (key == "general.alignment") alignment = alignment_from(in, value);
    if (metadata.contains(key)) in.fail_here("duplicate metadata key");
    metadata.emplace(std::move(key), std::move(value));
  }
}

// Reads the tensor infos (the reader is positioned after the metadata) and places each tensor
// in the data section, which starts at the first multiple of `alignment` after the infos.
std::map<std::string, GgufTensor, std::less<>> parse_tensors(ByteReader& in, uint64_t count,
                                                             uint64_t alignment,
                                                             const std::byte* base,
                                                             uint64_t file_bytes) {
  in.set_context("");
  if (count > in.remaining() / kMinTensorInfoBytes) {
    in.fail_here("tensor count " + std::to_string(count) + " cannot fit in the " +
                 std::to_string(in.remaining()) + " bytes left in the file");
  }
  std::map<std::string, GgufTensor, std::less<>> tensors;
  for (uint64_t i = 0; i < count; ++i) {
    in.set_context("tensor info " + std::to_string(i));
    GgufTensor tensor = read_tensor_info(in);
    if (tensors.contains(tensor.name)) in.fail_here("duplicate tensor name");
    tensors.emplace(tensor.name, std::move(tensor));
  }
  // in.offset() <= file_bytes, so rounding up cannot overflow for any 64-bit file size.
  const uint64_t data_start = (in.offset() + alignment - 1) / alignment * alignment;
  for (auto& [name, tensor] : tensors) {
    in.set_context("tensor " + name);
    if (tensor.offset % alignment != 0) {
      in.fail_here("data offset " + std::to_string(tensor.offset) +
                   " is not a multiple of the alignment " + std::to_string(alignment));
    }
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(data_start, tensor.offset, &begin) ||
        __builtin_add_overflow(begin, uint64_t{tensor.num_bytes}, &end) || end > file_bytes) {
      in.fail_here("data at offset " + std::to_string(tensor.offset) + " (" +
                   std::to_string(tensor.num_bytes) + " bytes of " + ggml_type_name(tensor.type) +
                   ") runs past the end of the file: the data section starts at byte " +
                   std::to_string(data_start) + " of " + std::to_string(file_bytes));
    }
    tensor.data = base + begin;
  }
  return tensors;
}

}  // namespace

std::vector<int64_t> GgufTensor::shape() const { return {ne.rbegin(), ne.rend()}; }

int64_t GgufTensor::num_elements() const {
  int64_t elements = 1;
  for (int64_t dim : ne) {
    if (dim < 0 || __builtin_mul_overflow(elements, dim, &elements)) {
      throw ModelError("tensor " + name + " has invalid shape " + detail::shape_string(shape()));
    }
  }
  return elements;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  MappedFile mapped = MappedFile::open(path);
  const auto file_bytes = static_cast<uint64_t>(mapped.size());
  if (file_bytes < kHeaderBytes) {
    fail(path, "file is " + std::to_string(file_bytes) + " bytes, too short for the " +
                   std::to_string(kHeaderBytes) + "-byte GGUF header (truncated?)");
  }

  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->mapping_ = std::move(mapped);
  const std::byte* base = file->mapping_.data();

  ByteReader in(path, base, file_bytes);
  const std::byte* magic = in.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    std::string got;
    for (int i = 0; i < 4; ++i) {
      const auto c = std::to_integer<unsigned char>(magic[i]);
      constexpr const char* kHex = "0123456789abcdef";
      got += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c))
                                     : std::string{'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
    fail(path, "bad magic \"" + got + "\": not a GGUF file");
  }
  file->version_ = in.u32("version");
  if (file->version_ == 1) {
    fail(path,
         "GGUF version 1 is not supported (it predates 64-bit counts; re-convert the file "
         "with a current llama.cpp)");
  }
  if (file->version_ != 2 && file->version_ != 3) {
    // llama.cpp can write big-endian files; their version reads byte-swapped here.
    const uint32_t swapped = __builtin_bswap32(file->version_);
    fail(path, "unsupported GGUF version " + std::to_string(file->version_) +
                   (swapped == 2 || swapped == 3 ? " (a big-endian file? only little-endian "
                                                   "GGUF files are supported)"
                                                 : " (supported: 2 and 3)"));
  }
  const uint64_t tensor_count = in.u64("tensor count");
  const uint64_t metadata_count = in.u64("metadata count");
  file->alignment_ = kDefaultAlignment;
  parse_metadata(in, metadata_count, file->metadata_, file->alignment_);
  file->tensors_ = parse_tensors(in, tensor_count, file->alignment_, base, file_bytes);
  return file;
}

GgufFile::~GgufFile() = default;

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::optional<DType> dtype_of_ggml(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return DType::F32;
    case GgmlType::kF16:
      return DType::F16;
    case GgmlType::kBF16:
      return DType::BF16;
    case GgmlType::kQ8_0:
      return DType::Q8_0;
    case GgmlType::kQ4_0:
      return DType::Q4_0;
    case GgmlType::kQ5_0:
      return DType::Q5_0;
    case GgmlType::kQ5_1:
      return DType::Q5_1;
    case GgmlType::kQ4_K:
      return DType::Q4_K;
    case GgmlType::kQ5_K:
      return DType::Q5_K;
    case GgmlType::kQ6_K:
      return DType::Q6_K;
    default:
      return std::nullopt;
  }
}

TensorView GgufFile::view(const GgufTensor& tensor) const {
  const std::optional<DType> dtype = dtype_of_ggml(tensor.type);
  if (!dtype) {
    fail(path_, "tensor " + tensor.name + " has type " + ggml_type_name(tensor.type) +
                    ", which this engine cannot compute with (supported: F32, F16, BF16, Q8_0, "
                    "Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)");
  }
  TensorView view;
  view.name = tensor.name;
  view.dtype = *dtype;
  view.shape = tensor.shape();
  view.data = tensor.data;
  view.num_bytes = tensor.num_bytes;
  view.file = path_;
  return view;
}

}  // namespace pagedserve::model
