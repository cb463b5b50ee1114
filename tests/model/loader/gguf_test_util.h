// Test helpers for the GGUF reader: a byte-level GGUF builder that shares no code with
// model/loader (it writes the layout from the specification field by field, so tests can also
// write files the real writer never would: wrong counts, bad types, misaligned offsets).
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagedserve::model::testing {

// GGUF metadata value type numbers, from the specification.
namespace gguf_raw {
constexpr uint32_t kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
                   kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12;
// ggml tensor type numbers.
constexpr uint32_t kTypeF32 = 0, kTypeF16 = 1, kTypeQ4_0 = 2, kTypeQ4_K = 12, kTypeI32 = 26,
                   kTypeBF16 = 30;
}  // namespace gguf_raw

// Little-endian appends.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return le(v, 1); }
  Bytes& u16(uint16_t v) { return le(v, 2); }
  Bytes& u32(uint32_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& f32(float v) { return u32(std::bit_cast<uint32_t>(v)); }
  Bytes& f64(double v) { return u64(std::bit_cast<uint64_t>(v)); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    data_.append(s);
    return *this;
  }
  Bytes& raw(std::string_view s) {
    data_.append(s);
    return *this;
  }
  // An array header: element type and count; the caller appends the elements.
  Bytes& array(uint32_t element_type, uint64_t count) { return u32(element_type).u64(count); }
  const std::string& str() const { return data_; }
  operator std::string() const { return data_; }  // NOLINT: convenient in builder calls

 private:
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) data_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string data_;
};

// A whole GGUF file: header, metadata entries, tensor infos, padding to `alignment`, data.
class GgufBuilder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;               // where the data section is placed
  std::optional<uint64_t> tensor_count;  // override the header's counts
  std::optional<uint64_t> metadata_count;
  std::string data;  // the data section

  // `payload` is the value's bytes (without the key and type).
  GgufBuilder& kv(std::string_view key, uint32_t type, const std::string& payload) {
    entries_.raw(Bytes().str(key).u32(type).str()).raw(payload);
    ++entry_count_;
    return *this;
  }
  GgufBuilder& tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type,
                      uint64_t offset) {
    infos_.str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) infos_.u64(d);
    infos_.u32(type).u64(offset);
    ++tensor_count_;
    return *this;
  }

  size_t infos_end() const { return 24 + entries_.str().size() + infos_.str().size(); }
  size_t data_start() const { return (infos_end() + alignment - 1) / alignment * alignment; }

  std::string build() const {
    std::string out = Bytes()
                          .raw("GGUF")
                          .u32(version)
                          .u64(tensor_count.value_or(tensor_count_))
                          .u64(metadata_count.value_or(entry_count_));
    out += entries_.str();
    out += infos_.str();
    if (tensor_count_ > 0 || !data.empty()) out.resize(data_start(), '\0');
    return out + data;
  }

 private:
  Bytes entries_;
  Bytes infos_;
  uint64_t entry_count_ = 0;
  uint64_t tensor_count_ = 0;
};

}  // namespace pagedserve::model::testing
