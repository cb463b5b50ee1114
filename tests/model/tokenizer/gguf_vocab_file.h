// VocabFile: a metadata-only GGUF file (a tokenizer vocabulary) written byte by byte with the
// loader tests' builder (tests/model/loader/gguf_test_util.h), so the tokenizer tests do not
// depend on model/loader's GgufWriter.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/model/loader/gguf_test_util.h"

namespace pagedserve::model::testing {

class VocabFile {
 public:
  void add_string(std::string_view key, std::string_view value) {
    builder_.kv(key, gguf_raw::kString, Bytes().str(value));
  }
  void add_uint32(std::string_view key, uint32_t value) {
    builder_.kv(key, gguf_raw::kU32, Bytes().u32(value));
  }
  void add_bool(std::string_view key, bool value) {
    builder_.kv(key, gguf_raw::kBool, Bytes().u8(value ? 1 : 0));
  }
  void add_string_array(std::string_view key, const std::vector<std::string>& values) {
    Bytes payload;
    payload.array(gguf_raw::kString, values.size());
    for (const std::string& value : values) payload.str(value);
    builder_.kv(key, gguf_raw::kArray, payload);
  }
  void add_float32_array(std::string_view key, const std::vector<float>& values) {
    Bytes payload;
    payload.array(gguf_raw::kF32, values.size());
    for (const float value : values) payload.f32(value);
    builder_.kv(key, gguf_raw::kArray, payload);
  }
  void add_int32_array(std::string_view key, const std::vector<int32_t>& values) {
    Bytes payload;
    payload.array(gguf_raw::kI32, values.size());
    for (const int32_t value : values) payload.u32(static_cast<uint32_t>(value));
    builder_.kv(key, gguf_raw::kArray, payload);
  }
  void write(const std::filesystem::path& path) const {
    std::ofstream(path, std::ios::binary) << builder_.build();
  }

 private:
  GgufBuilder builder_;
};

}  // namespace pagedserve::model::testing
