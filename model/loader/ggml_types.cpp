// The ggml tensor type table: names, block sizes and block bytes of every ggml type a GGUF
// file can hold (ggml_type_name, ggml_block_size, ggml_row_bytes; see gguf.h).
#include <array>
#include <string>

#include "model/loader/gguf.h"

namespace pagedserve::model {

namespace {

// Block size (elements) and block bytes of every ggml type, from ggml's type_traits
// (ggml/src/ggml.c) and the block structs in ggml-common.h. Numbers ggml retired (4, 5, 31-33,
// 36-38) are gaps: files using them are rejected as unknown.
struct GgmlTypeInfo {
  const char* name = nullptr;
  uint32_t block_elements = 0;
  uint32_t block_bytes = 0;
};

constexpr std::array<GgmlTypeInfo, 42> kGgmlTypes = [] {
  std::array<GgmlTypeInfo, 42> t{};
  t[0] = {"F32", 1, 4};
  t[1] = {"F16", 1, 2};
  t[2] = {"Q4_0", 32, 18};
  t[3] = {"Q4_1", 32, 20};
  t[6] = {"Q5_0", 32, 22};
  t[7] = {"Q5_1", 32, 24};
  t[8] = {"Q8_0", 32, 34};
  t[9] = {"Q8_1", 32, 36};
  t[10] = {"Q2_K", 256, 84};
  t[11] = {"Q3_K", 256, 110};
  t[12] = {"Q4_K", 256, 144};
  t[13] = {"Q5_K", 256, 176};
  t[14] = {"Q6_K", 256, 210};
  t[15] = {"Q8_K", 256, 292};
  t[16] = {"IQ2_XXS", 256, 66};
  t[17] = {"IQ2_XS", 256, 74};
  t[18] = {"IQ3_XXS", 256, 98};
  t[19] = {"IQ1_S", 256, 50};
  t[20] = {"IQ4_NL", 32, 18};
  t[21] = {"IQ3_S", 256, 110};
  t[22] = {"IQ2_S", 256, 82};
  t[23] = {"IQ4_XS", 256, 136};
  t[24] = {"I8", 1, 1};
  t[25] = {"I16", 1, 2};
  t[26] = {"I32", 1, 4};
  t[27] = {"I64", 1, 8};
  t[28] = {"F64", 1, 8};
  t[29] = {"IQ1_M", 256, 56};
  t[30] = {"BF16", 1, 2};
  t[34] = {"TQ1_0", 256, 54};
  t[35] = {"TQ2_0", 256, 66};
  t[39] = {"MXFP4", 32, 17};
  t[40] = {"NVFP4", 64, 36};
  t[41] = {"Q1_0", 128, 18};
  return t;
}();

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  if (type >= kGgmlTypes.size() || kGgmlTypes[type].name == nullptr) return nullptr;
  return &kGgmlTypes[type];
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  return info != nullptr ? info->name : "type " + std::to_string(type);
}

std::optional<size_t> ggml_row_bytes(uint32_t type, int64_t elements) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (info == nullptr || elements < 0 || elements % info->block_elements != 0) {
    return std::nullopt;
  }
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(elements / info->block_elements),
                             size_t{info->block_bytes}, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

std::optional<int64_t> ggml_block_size(uint32_t type) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (info == nullptr) return std::nullopt;
  return int64_t{info->block_elements};
}

}  // namespace pagedserve::model
