// Tests for GgufFile on well-formed input: every metadata value type (built byte by byte with
// the test's own GgufBuilder), the typed getters, tensors of 1 to 4 dimensions with their
// shapes, views and F16/BF16 widening, alignment, the ggml type table, and the real GGUF files
// in ../shared checked against facts read independently (config.json, model.safetensors,
// the tokenizer test vectors).
#include "model/loader/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "model/loader/model_error.h"
#include "tests/model/loader/gguf_test_util.h"
#include "tests/model/loader/loader_test_util.h"

namespace pagedserve::model {
namespace {

using testing::Bytes;
using ::testing::ElementsAre;
using testing::GgufBuilder;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_file;
namespace raw = testing::gguf_raw;

std::unique_ptr<GgufFile> open_bytes(const TempDir& dir, const std::string& bytes) {
  write_file(dir / "x.gguf", bytes);
  return GgufFile::open(dir / "x.gguf");
}

TEST(GgufMetadata, EveryScalarType) {
  GgufBuilder b;
  b.kv("u8", raw::kU8, Bytes().u8(200))
      .kv("i8", raw::kI8, Bytes().u8(0xfb))  // -5
      .kv("u16", raw::kU16, Bytes().u16(60000))
      .kv("i16", raw::kI16, Bytes().u16(0x8ad0))  // -30000
      .kv("u32", raw::kU32, Bytes().u32(4000000000u))
      .kv("i32", raw::kI32, Bytes().u32(0x88ca6c00u))  // -2000000000
      .kv("f32", raw::kF32, Bytes().f32(1.5f))
      .kv("bool_t", raw::kBool, Bytes().u8(1))
      .kv("bool_f", raw::kBool, Bytes().u8(0))
      .kv("str", raw::kString, Bytes().str("h\xc3\xa9llo"))
      .kv("empty", raw::kString, Bytes().str(""))
      .kv("u64", raw::kU64, Bytes().u64(0x8000000000000005ull))
      .kv("i64", raw::kI64, Bytes().u64(0xc000000000000000ull))  // -2^62
      .kv("f64", raw::kF64, Bytes().f64(-0.1));
  TempDir dir;
  const auto file = open_bytes(dir, b.build());
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->metadata().size(), 14u);
  EXPECT_EQ(file->tensors().size(), 0u);

  EXPECT_EQ(file->get_int("u8"), 200);
  EXPECT_EQ(file->get_int("i8"), -5);
  EXPECT_EQ(file->get_int("u16"), 60000);
  EXPECT_EQ(file->get_int("i16"), -30000);
  EXPECT_EQ(file->get_int("u32"), 4000000000ll);
  EXPECT_EQ(file->get_int("i32"), -2000000000);
  EXPECT_EQ(file->get_int("i64"), -(int64_t{1} << 62));
  EXPECT_EQ(file->get_float("f32"), 1.5);
  EXPECT_EQ(file->get_float("f64"), -0.1);
  EXPECT_EQ(file->get_float("i16"), -30000.0);  // integers are numbers too
  EXPECT_EQ(file->get_bool("bool_t"), true);
  EXPECT_EQ(file->get_bool("bool_f"), false);
  EXPECT_EQ(file->get_string("str"), "h\xc3\xa9llo");
  EXPECT_EQ(file->get_string("empty"), "");
  EXPECT_EQ(file->get_string("absent"), std::nullopt);
  EXPECT_EQ(file->get_int("absent"), std::nullopt);

  // The raw values keep their types; uint64 is held unsigned.
  const GgufValue* u64 = file->find("u64");
  ASSERT_NE(u64, nullptr);
  EXPECT_EQ(u64->type, GgufType::kUint64);
  EXPECT_EQ(std::get<uint64_t>(u64->value), 0x8000000000000005ull);
  EXPECT_EQ(file->find("u8")->type, GgufType::kUint8);
  EXPECT_EQ(file->find("f32")->type, GgufType::kFloat32);
  EXPECT_EQ(file->find("bool_t")->type, GgufType::kBool);
  EXPECT_EQ(file->find("str")->type, GgufType::kString);
  EXPECT_EQ(file->get_float("u64"), 9223372036854775813.0);
  EXPECT_THAT([&] { file->get_int("u64"); },
              ::testing::ThrowsMessage<ModelError>(HasSubstr("above INT64_MAX")));
}

TEST(GgufMetadata, Arrays) {
  Bytes nested;  // [[1, 2, 3], [], [255]] as arrays of uint8
  nested.array(raw::kArray, 3);
  nested.array(raw::kU8, 3).u8(1).u8(2).u8(3);
  nested.array(raw::kU8, 0);
  nested.array(raw::kU8, 1).u8(255);
  Bytes deep;  // [[["x"]]]
  deep.array(raw::kArray, 1).array(raw::kArray, 1).array(raw::kString, 1).str("x");
  GgufBuilder b;
  b.kv("strings", raw::kArray, Bytes().array(raw::kString, 3).str("a").str("").str("ccc"))
      .kv("ints", raw::kArray, Bytes().array(raw::kI32, 3).u32(7).u32(0xffffffffu).u32(0))
      .kv("u64s", raw::kArray, Bytes().array(raw::kU64, 2).u64(1).u64(~0ull))
      .kv("floats", raw::kArray, Bytes().array(raw::kF32, 2).f32(0.25f).f32(-3.0f))
      .kv("doubles", raw::kArray, Bytes().array(raw::kF64, 1).f64(1e300))
      .kv("bools", raw::kArray, Bytes().array(raw::kBool, 2).u8(1).u8(0))
      .kv("empty", raw::kArray, Bytes().array(raw::kString, 0))
      .kv("nested", raw::kArray, nested)
      .kv("deep", raw::kArray, deep);
  TempDir dir;
  const auto file = open_bytes(dir, b.build());

  EXPECT_THAT(*file->get_string_array("strings"), ElementsAre("a", "", "ccc"));
  EXPECT_THAT(*file->get_int_array("ints"), ElementsAre(7, -1, 0));
  EXPECT_THAT(*file->get_float_array("floats"), ElementsAre(0.25f, -3.0f));
  EXPECT_THAT(*file->get_float_array("doubles"),
              ElementsAre(std::numeric_limits<float>::infinity()));
  EXPECT_TRUE(file->get_string_array("empty")->empty());
  EXPECT_THAT([&] { file->get_int_array("u64s"); },
              ::testing::ThrowsMessage<ModelError>(HasSubstr("element 1 is above INT64_MAX")));

  const GgufValue& bools = *file->find("bools");
  EXPECT_EQ(bools.element_type, GgufType::kBool);
  const auto& bool_values = std::get<std::vector<GgufValue>>(bools.value);
  ASSERT_EQ(bool_values.size(), 2u);
  EXPECT_TRUE(std::get<bool>(bool_values[0].value));
  EXPECT_FALSE(std::get<bool>(bool_values[1].value));

  const GgufValue& outer = *file->find("nested");
  EXPECT_EQ(outer.type, GgufType::kArray);
  EXPECT_EQ(outer.element_type, GgufType::kArray);
  const auto& inner = std::get<std::vector<GgufValue>>(outer.value);
  ASSERT_EQ(inner.size(), 3u);
  std::vector<std::vector<int64_t>> values;
  for (const GgufValue& array : inner) {
    EXPECT_EQ(array.element_type, GgufType::kUint8);
    values.emplace_back();
    for (const GgufValue& e : std::get<std::vector<GgufValue>>(array.value)) {
      EXPECT_EQ(e.type, GgufType::kUint8);
      values.back().push_back(std::get<int64_t>(e.value));
    }
  }
  EXPECT_EQ(values, (std::vector<std::vector<int64_t>>{{1, 2, 3}, {}, {255}}));

  const GgufValue* level = file->find("deep");
  for (int i = 0; i < 2; ++i) level = &std::get<std::vector<GgufValue>>(level->value).at(0);
  EXPECT_EQ(level->element_type, GgufType::kString);
  EXPECT_EQ(std::get<std::string>(std::get<std::vector<GgufValue>>(level->value).at(0).value), "x");
}

TEST(GgufMetadata, WrongTypedKeysNameFileKeyAndBothTypes) {
  GgufBuilder b;
  b.kv("name", raw::kString, Bytes().str("x"))
      .kv("count", raw::kU32, Bytes().u32(3))
      .kv("flag", raw::kBool, Bytes().u8(1))
      .kv("ints", raw::kArray, Bytes().array(raw::kI32, 1).u32(1))
      .kv("strings", raw::kArray, Bytes().array(raw::kString, 1).str("s"));
  TempDir dir;
  const auto file = open_bytes(dir, b.build());
  const std::string prefix = (dir / "x.gguf").string() + ": metadata key ";
  auto error = [](auto&& call) {
    try {
      call();
    } catch (const ModelError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error([&] { file->get_int("name"); }),
            prefix + "name has type string, expected an integer");
  EXPECT_EQ(error([&] { file->get_float("name"); }),
            prefix + "name has type string, expected a number");
  EXPECT_EQ(error([&] { file->get_string("count"); }),
            prefix + "count has type uint32, expected string");
  EXPECT_EQ(error([&] { file->get_bool("count"); }),
            prefix + "count has type uint32, expected bool");
  EXPECT_EQ(error([&] { file->get_int("flag"); }),
            prefix + "flag has type bool, expected an integer");
  EXPECT_EQ(error([&] { file->get_string_array("ints"); }),
            prefix + "ints has type array of int32, expected array of string");
  EXPECT_EQ(error([&] { file->get_float_array("ints"); }),
            prefix + "ints has type array of int32, expected array of float32 or float64");
  EXPECT_EQ(error([&] { file->get_int_array("strings"); }),
            prefix + "strings has type array of string, expected array of integers");
  EXPECT_EQ(error([&] { file->get_int_array("count"); }),
            prefix + "count has type uint32, expected array of integers");
  EXPECT_EQ(error([&] { file->get_string("ints"); }),
            prefix + "ints has type array of int32, expected string");
}

// IEEE half and bfloat16 bit patterns with their exact float values.
struct HalfCase {
  uint16_t bits;
  float value;
};
constexpr HalfCase kF16Cases[] = {{0x3c00, 1.0f},     {0xc000, -2.0f},           {0x0001, 0x1p-24f},
                                  {0x7bff, 65504.0f}, {0x3555, 0.333251953125f}, {0x8000, -0.0f}};
constexpr HalfCase kBF16Cases[] = {{0x3f80, 1.0f},
                                   {0xc0a0, -5.0f},
                                   {0x4049, 3.140625f},
                                   {0x0000, 0.0f},
                                   {0x7f80, std::numeric_limits<float>::infinity()},
                                   {0x0001, 0x1p-133f}};

TEST(GgufTensors, ShapesViewsAndWidening) {
  GgufBuilder b;
  b.kv("general.architecture", raw::kString, Bytes().str("llama"));
  Bytes data;
  // vec: F32 ne {3} at 0 (12 bytes, padded to 32)
  data.f32(1.0f).f32(-2.5f).f32(1e-30f).raw(std::string(20, '\0'));
  b.tensor("vec", {3}, raw::kTypeF32, 0);
  // half: F16 ne {3, 2} -> shape {2, 3}, at 32
  for (const HalfCase& c : kF16Cases) data.u16(c.bits);
  data.raw(std::string(20, '\0'));
  b.tensor("half", {3, 2}, raw::kTypeF16, 32);
  // brain: BF16 ne {1, 3, 2} -> shape {2, 3, 1}, at 64
  for (const HalfCase& c : kBF16Cases) data.u16(c.bits);
  data.raw(std::string(20, '\0'));
  b.tensor("brain", {1, 3, 2}, raw::kTypeBF16, 64);
  // four: F32 ne {2, 1, 2, 2} -> shape {2, 2, 1, 2}, at 96, values 0..7
  for (int i = 0; i < 8; ++i) data.f32(static_cast<float>(i));
  b.tensor("four", {2, 1, 2, 2}, raw::kTypeF32, 96);
  b.data = data;
  TempDir dir;
  const std::string bytes = b.build();
  const auto file = open_bytes(dir, bytes);
  ASSERT_EQ(file->tensors().size(), 4u);
  EXPECT_EQ(file->alignment(), 32u);

  const GgufTensor& vec = *file->find_tensor("vec");
  EXPECT_THAT(vec.ne, ElementsAre(3));
  EXPECT_THAT(vec.shape(), ElementsAre(3));
  EXPECT_EQ(vec.num_bytes, 12u);
  EXPECT_EQ(vec.type, raw::kTypeF32);
  EXPECT_EQ(vec.offset, 0u);
  EXPECT_THAT(to_f32(file->view(vec)), ElementsAre(1.0f, -2.5f, 1e-30f));

  const GgufTensor& half = *file->find_tensor("half");
  EXPECT_THAT(half.shape(), ElementsAre(2, 3));
  EXPECT_EQ(half.num_elements(), 6);
  const TensorView half_view = file->view(half);
  EXPECT_EQ(half_view.dtype, DType::F16);
  EXPECT_THAT(half_view.shape, ElementsAre(2, 3));
  EXPECT_EQ(half_view.name, "half");
  EXPECT_EQ(half_view.file, dir / "x.gguf");
  // The view points at the file's bytes: data section start + offset.
  EXPECT_EQ(std::memcmp(half_view.data, bytes.data() + b.data_start() + 32, 12), 0);
  const std::vector<float> halves = to_f32(half_view);
  for (size_t i = 0; i < halves.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(halves[i]), std::bit_cast<uint32_t>(kF16Cases[i].value)) << i;
  }

  const TensorView brain = file->view(*file->find_tensor("brain"));
  EXPECT_EQ(brain.dtype, DType::BF16);
  EXPECT_THAT(brain.shape, ElementsAre(2, 3, 1));
  const std::vector<float> brains = to_f32(brain);
  for (size_t i = 0; i < brains.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(brains[i]), std::bit_cast<uint32_t>(kBF16Cases[i].value))
        << i;
  }

  const GgufTensor& four = *file->find_tensor("four");
  EXPECT_THAT(four.shape(), ElementsAre(2, 2, 1, 2));
  EXPECT_EQ(four.num_elements(), 8);
  EXPECT_THAT(to_f32(file->view(four)), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_EQ(file->find_tensor("absent"), nullptr);
}

TEST(GgufTensors, CustomAlignmentAndVersion2) {
  for (uint64_t alignment : {1u, 8u, 64u, 4096u}) {
    GgufBuilder b;
    b.version = 2;
    b.alignment = alignment;
    b.kv("general.alignment", raw::kU32, Bytes().u32(static_cast<uint32_t>(alignment)));
    b.tensor("a", {2}, raw::kTypeF32, 0);
    const uint64_t b_offset = (8 + alignment - 1) / alignment * alignment;
    b.tensor("b", {1}, raw::kTypeF32, b_offset);
    std::string data = Bytes().f32(4.0f).f32(5.0f);
    data.resize(b_offset, '\0');
    b.data = data + std::string(Bytes().f32(6.0f));
    TempDir dir;
    const auto file = open_bytes(dir, b.build());
    EXPECT_EQ(file->version(), 2u);
    EXPECT_EQ(file->alignment(), alignment);
    EXPECT_THAT(to_f32(file->view(*file->find_tensor("a"))), ElementsAre(4.0f, 5.0f));
    EXPECT_THAT(to_f32(file->view(*file->find_tensor("b"))), ElementsAre(6.0f)) << alignment;
  }
}

TEST(GgmlTypes, NamesAndRowBytesMatchGgmlBlockLayouts) {
  // Block sizes and bytes written out from the block structs in ggml-common.h (half = 2 bytes).
  struct Case {
    uint32_t type;
    const char* name;
    int64_t block;
    size_t bytes;
  };
  const size_t h = 2;
  const Case cases[] = {
      {0, "F32", 1, 4},
      {1, "F16", 1, 2},
      {2, "Q4_0", 32, h + 16},
      {3, "Q4_1", 32, 2 * h + 16},
      {6, "Q5_0", 32, h + 4 + 16},
      {7, "Q5_1", 32, 2 * h + 4 + 16},
      {8, "Q8_0", 32, h + 32},
      {9, "Q8_1", 32, 2 * h + 32},
      {10, "Q2_K", 256, 2 * h + 256 / 16 + 256 / 4},
      {11, "Q3_K", 256, h + 256 / 4 + 256 / 8 + 12},
      {12, "Q4_K", 256, 2 * h + 12 + 256 / 2},
      {13, "Q5_K", 256, 2 * h + 12 + 256 / 2 + 256 / 8},
      {14, "Q6_K", 256, h + 256 / 16 + 3 * 256 / 4},
      {15, "Q8_K", 256, 4 + 256 + 256 / 16 * 2},
      {16, "IQ2_XXS", 256, h + 256 / 8 * 2},
      {17, "IQ2_XS", 256, h + 256 / 8 * 2 + 256 / 32},
      {18, "IQ3_XXS", 256, h + 3 * (256 / 8)},
      {19, "IQ1_S", 256, h + 256 / 8 + 256 / 16},
      {20, "IQ4_NL", 32, h + 16},
      {21, "IQ3_S", 256, h + 13 * (256 / 32) + 256 / 64},
      {22, "IQ2_S", 256, h + 256 / 4 + 256 / 16},
      {23, "IQ4_XS", 256, h + 2 + 256 / 64 + 256 / 2},
      {24, "I8", 1, 1},
      {25, "I16", 1, 2},
      {26, "I32", 1, 4},
      {27, "I64", 1, 8},
      {28, "F64", 1, 8},
      {29, "IQ1_M", 256, 256 / 8 + 256 / 16 + 256 / 32},
      {30, "BF16", 1, 2},
      {34, "TQ1_0", 256, h + 256 / 64 + (256 - 4 * 256 / 64) / 5},
      {35, "TQ2_0", 256, h + 256 / 4},
      {39, "MXFP4", 32, 1 + 16},
      {40, "NVFP4", 64, 64 / 16 + 64 / 2},
      {41, "Q1_0", 128, h + 128 / 8},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ggml_type_name(c.type), c.name);
    EXPECT_EQ(ggml_block_size(c.type), c.block) << c.name;
    EXPECT_EQ(ggml_row_bytes(c.type, 0), size_t{0}) << c.name;
    EXPECT_EQ(ggml_row_bytes(c.type, c.block), c.bytes) << c.name;
    EXPECT_EQ(ggml_row_bytes(c.type, 3 * c.block), 3 * c.bytes) << c.name;
    if (c.block > 1) {
      EXPECT_EQ(ggml_row_bytes(c.type, c.block + 1), std::nullopt) << c.name;
    }
    EXPECT_EQ(ggml_row_bytes(c.type, -c.block), std::nullopt) << c.name;
  }
  // Numbers ggml retired or never used are unknown.
  for (uint32_t retired : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(ggml_type_name(retired), "type " + std::to_string(retired));
    EXPECT_EQ(ggml_block_size(retired), std::nullopt);
    EXPECT_EQ(ggml_row_bytes(retired, 32), std::nullopt);
  }
  EXPECT_EQ(ggml_row_bytes(0, std::numeric_limits<int64_t>::max()), std::nullopt);  // overflow
}

}  // namespace
}  // namespace pagedserve::model
