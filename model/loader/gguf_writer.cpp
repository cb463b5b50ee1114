// GgufWriter: serializes metadata and tensors to a GGUF v3 file (see gguf.h). Values and
// tensors are checked when they are added (a value whose variant does not match its type, an
// out-of-range integer, a duplicate key or name, a byte count that does not match the shape),
// so a written file always reads back with GgufFile. general.alignment is written, as the
// first metadata entry, only when the alignment is not GGUF's default of 32.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "model/loader/gguf.h"

namespace pagedserve::model {

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kVersion = 3;
constexpr const char* kAlignmentKey = "general.alignment";

[[noreturn]] void invalid(const std::string& what, const std::string& problem) {
  throw std::invalid_argument("GgufWriter: " + what + ": " + problem);
}

// Inclusive range of an integer metadata type (uint64 is checked separately).
std::pair<int64_t, int64_t> integer_range(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return {0, std::numeric_limits<uint8_t>::max()};
    case GgufType::kInt8:
      return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case GgufType::kUint16:
      return {0, std::numeric_limits<uint16_t>::max()};
    case GgufType::kInt16:
      return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    case GgufType::kUint32:
      return {0, std::numeric_limits<uint32_t>::max()};
    case GgufType::kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

// Checks that `value` holds what its type says, recursively for arrays.
void check_value(const std::string& key, const GgufValue& value) {
  const char* type = gguf_type_name(value.type);
  switch (value.type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kInt64: {
      const auto* v = std::get_if<int64_t>(&value.value);
      if (v == nullptr) invalid(key, std::string(type) + " value must hold an int64_t");
      const auto [low, high] = integer_range(value.type);
      if (*v < low || *v > high) {
        invalid(key, std::to_string(*v) + " does not fit in " + type);
      }
      return;
    }
    case GgufType::kUint64:
      if (!std::holds_alternative<uint64_t>(value.value)) {
        invalid(key, "uint64 value must hold a uint64_t");
      }
      return;
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      if (!std::holds_alternative<double>(value.value)) {
        invalid(key, std::string(type) + " value must hold a double");
      }
      return;
    case GgufType::kBool:
      if (!std::holds_alternative<bool>(value.value)) invalid(key, "bool value must hold a bool");
      return;
    case GgufType::kString:
      if (!std::holds_alternative<std::string>(value.value)) {
        invalid(key, "string value must hold a std::string");
      }
      return;
    case GgufType::kArray: {
      const auto* elements = std::get_if<std::vector<GgufValue>>(&value.value);
      if (elements == nullptr) invalid(key, "array value must hold a vector");
      for (const GgufValue& element : *elements) {
        if (element.type != value.element_type) {
          invalid(key, std::string("array of ") + gguf_type_name(value.element_type) +
                           " has an element of type " + gguf_type_name(element.type));
        }
        check_value(key, element);
      }
      return;
    }
  }
  invalid(key, "unknown value type " + std::to_string(static_cast<uint32_t>(value.type)));
}

// Little-endian serialization into a growing buffer.
class LeBuffer {
 public:
  void uint(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) data_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void string(const std::string& s) {
    uint(s.size(), 8);
    data_ += s;
  }
  void value(const GgufValue& v);
  void pad_to(uint64_t alignment) {
    data_.resize((data_.size() + alignment - 1) / alignment * alignment, '\0');
  }
  const std::string& data() const { return data_; }

 private:
  std::string data_;
};

void LeBuffer::value(const GgufValue& v) {
  switch (v.type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      uint(v.type == GgufType::kBool ? std::get<bool>(v.value)
                                     : static_cast<uint64_t>(std::get<int64_t>(v.value)),
           1);
      return;
    case GgufType::kUint16:
    case GgufType::kInt16:
      uint(static_cast<uint64_t>(std::get<int64_t>(v.value)), 2);
      return;
    case GgufType::kUint32:
    case GgufType::kInt32:
      uint(static_cast<uint64_t>(std::get<int64_t>(v.value)), 4);
      return;
    case GgufType::kInt64:
      uint(static_cast<uint64_t>(std::get<int64_t>(v.value)), 8);
      return;
    case GgufType::kUint64:
      uint(std::get<uint64_t>(v.value), 8);
      return;
    case GgufType::kFloat32:
      uint(std::bit_cast<uint32_t>(static_cast<float>(std::get<double>(v.value))), 4);
      return;
    case GgufType::kFloat64:
      uint(std::bit_cast<uint64_t>(std::get<double>(v.value)), 8);
      return;
    case GgufType::kString:
      string(std::get<std::string>(v.value));
      return;
    case GgufType::kArray: {
      const auto& elements = std::get<std::vector<GgufValue>>(v.value);
      uint(static_cast<uint32_t>(v.element_type), 4);
      uint(elements.size(), 8);
      for (const GgufValue& element : elements) value(element);
      return;
    }
  }
}

// Padding in bounded chunks: the alignment may be large.
void write_zeros(std::ofstream& out, uint64_t count) {
  static constexpr char kZeros[4096] = {};
  while (count > 0) {
    const uint64_t chunk = std::min<uint64_t>(count, sizeof(kZeros));
    out.write(kZeros, static_cast<std::streamsize>(chunk));
    count -= chunk;
  }
}

GgufValue integer(GgufType type, int64_t v) { return {type, GgufType::kUint8, v}; }

template <typename T>
GgufValue array(GgufType element_type, const std::vector<T>& values, auto make_element) {
  std::vector<GgufValue> elements;
  elements.reserve(values.size());
  for (const T& v : values) elements.push_back(make_element(v));
  return {GgufType::kArray, element_type, std::move(elements)};
}

}  // namespace

void GgufWriter::add(std::string key, GgufValue value) {
  if (key == kAlignmentKey) {
    invalid(key, "set the alignment through the GgufWriter constructor");
  }
  for (const auto& [existing, unused] : metadata_) {
    if (existing == key) invalid(key, "duplicate metadata key");
  }
  check_value(key, value);
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_string(std::string key, std::string value) {
  add(std::move(key), {GgufType::kString, GgufType::kUint8, std::move(value)});
}
void GgufWriter::add_uint32(std::string key, uint32_t value) {
  add(std::move(key), integer(GgufType::kUint32, value));
}
void GgufWriter::add_int32(std::string key, int32_t value) {
  add(std::move(key), integer(GgufType::kInt32, value));
}
void GgufWriter::add_float32(std::string key, float value) {
  add(std::move(key), {GgufType::kFloat32, GgufType::kUint8, double{value}});
}
void GgufWriter::add_bool(std::string key, bool value) {
  add(std::move(key), {GgufType::kBool, GgufType::kUint8, value});
}
void GgufWriter::add_string_array(std::string key, const std::vector<std::string>& values) {
  add(std::move(key), array(GgufType::kString, values, [](const std::string& v) {
        return GgufValue{GgufType::kString, GgufType::kUint8, v};
      }));
}
void GgufWriter::add_float32_array(std::string key, const std::vector<float>& values) {
  add(std::move(key), array(GgufType::kFloat32, values, [](float v) {
        return GgufValue{GgufType::kFloat32, GgufType::kUint8, double{v}};
      }));
}
void GgufWriter::add_int32_array(std::string key, const std::vector<int32_t>& values) {
  add(std::move(key),
      array(GgufType::kInt32, values, [](int32_t v) { return integer(GgufType::kInt32, v); }));
}

void GgufWriter::add_tensor(std::string name, GgmlType type, const std::vector<int64_t>& shape,
                            std::vector<std::byte> bytes) {
  const std::string what = "tensor " + name;
  for (const Tensor& existing : tensors_) {
    if (existing.name == name) invalid(what, "duplicate tensor name");
  }
  if (shape.empty() || shape.size() > 4) {
    invalid(what, "has " + std::to_string(shape.size()) + " dimensions (1 to 4 allowed)");
  }
  const auto type_number = static_cast<uint32_t>(type);
  // The innermost (last row-major) dimension is ggml's ne[0], the one blocks run along.
  const std::optional<size_t> row_bytes = ggml_row_bytes(type_number, shape.back());
  if (!row_bytes) {
    invalid(what, "innermost dimension " + std::to_string(shape.back()) +
                      " is not a valid row of " + ggml_type_name(type_number));
  }
  size_t expected = *row_bytes;
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    if (shape[d] < 0 ||
        __builtin_mul_overflow(expected, static_cast<size_t>(shape[d]), &expected)) {
      invalid(what, "dimension " + std::to_string(shape[d]) + " is negative or too large");
    }
  }
  if (bytes.size() != expected) {
    invalid(what, std::to_string(bytes.size()) + " bytes given, the shape needs " +
                      std::to_string(expected));
  }
  tensors_.push_back({std::move(name), type, shape, std::move(bytes)});
}

void GgufWriter::write(const std::filesystem::path& path) const {
  if (!std::has_single_bit(alignment_) || alignment_ > std::numeric_limits<uint32_t>::max()) {
    invalid("alignment", std::to_string(alignment_) + " is not a power of two below 2^32");
  }
  const bool write_alignment = alignment_ != kDefaultAlignment;
  LeBuffer header;
  header.uint(0x46554747u, 4);  // "GGUF" read as a little-endian u32
  header.uint(kVersion, 4);
  header.uint(tensors_.size(), 8);
  header.uint(metadata_.size() + (write_alignment ? 1 : 0), 8);
  if (write_alignment) {
    header.string(kAlignmentKey);
    header.uint(static_cast<uint32_t>(GgufType::kUint32), 4);
    header.uint(alignment_, 4);
  }
  for (const auto& [key, value] : metadata_) {
    header.string(key);
    header.uint(static_cast<uint32_t>(value.type), 4);
    header.value(value);
  }
  uint64_t offset = 0;  // within the data section; each tensor starts aligned
  for (const Tensor& t : tensors_) {
    header.string(t.name);
    header.uint(t.shape.size(), 4);
    for (auto dim = t.shape.rbegin(); dim != t.shape.rend(); ++dim) header.uint(*dim, 8);
    header.uint(static_cast<uint32_t>(t.type), 4);
    header.uint(offset, 8);
    offset += (t.bytes.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  header.pad_to(alignment_);

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw std::runtime_error("cannot create " + path.string() + ": " + std::strerror(errno));
  out.write(header.data().data(), static_cast<std::streamsize>(header.data().size()));
  for (const Tensor& t : tensors_) {
    if (!t.bytes.empty()) {
      out.write(reinterpret_cast<const char*>(t.bytes.data()),
                static_cast<std::streamsize>(t.bytes.size()));
    }
    write_zeros(out, (alignment_ - t.bytes.size() % alignment_) % alignment_);
  }
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
}

}  // namespace pagedserve::model
