// Tests for GgufWriter: its bytes equal those of the test's own GgufBuilder for the same
// content (so the layout is checked against the specification, not against the reader), every
// value kind and tensor type round-trips through GgufFile, custom alignment is honoured, and
// what the reader would reject is refused when added.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "model/loader/gguf.h"
#include "tests/model/loader/gguf_test_util.h"
#include "tests/model/loader/loader_test_util.h"

namespace pagedserve::model {
namespace {

using testing::Bytes;
using ::testing::ElementsAre;
using testing::GgufBuilder;
using ::testing::HasSubstr;
using testing::TempDir;
namespace raw = testing::gguf_raw;

std::vector<std::byte> to_bytes(const std::string& s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

TEST(GgufWriter, BytesMatchTheSpecificationLayout) {
  for (uint64_t alignment : {32u, 64u}) {
    const std::string a = Bytes().f32(1.0f).f32(2.0f).f32(3.0f);  // F32 [3]
    const std::string h = Bytes().u16(0x3c00).u16(0xc000);        // F16 [2, 1]
    GgufWriter writer(alignment);
    writer.add_string("general.architecture", "llama");
    writer.add_uint32("n", 7);
    writer.add_float32_array("scores", {0.5f, -1.0f});
    writer.add_tensor("a", GgmlType::kF32, {3}, to_bytes(a));
    writer.add_tensor("h", GgmlType::kF16, {2, 1}, to_bytes(h));
    TempDir dir;
    writer.write(dir / "w.gguf");

    GgufBuilder expected;
    expected.alignment = alignment;
    if (alignment != 32) {
      expected.kv("general.alignment", raw::kU32, Bytes().u32(static_cast<uint32_t>(alignment)));
    }
    expected.kv("general.architecture", raw::kString, Bytes().str("llama"))
        .kv("n", raw::kU32, Bytes().u32(7))
        .kv("scores", raw::kArray, Bytes().array(raw::kF32, 2).f32(0.5f).f32(-1.0f))
        .tensor("a", {3}, raw::kTypeF32, 0)
        .tensor("h", {1, 2}, raw::kTypeF16, alignment);  // ne is the shape reversed
    expected.data =
        a + std::string(alignment - a.size(), '\0') + h + std::string(alignment - h.size(), '\0');
    EXPECT_EQ(testing::read_file(dir / "w.gguf"), expected.build()) << alignment;
  }
}

TEST(GgufWriter, EveryValueKindAndTensorTypeRoundTrips) {
  GgufWriter writer;
  writer.add_string("s", "h\xc3\xa9llo");
  writer.add_uint32("u32", 4000000000u);
  writer.add_int32("i32", -7);
  writer.add_float32("f32", 0.1f);
  writer.add_bool("b", true);
  writer.add_string_array("ss", {"a", "", "ccc"});
  writer.add_float32_array("fs", {1.5f, -0.0f});
  writer.add_int32_array("is", {1, -2, std::numeric_limits<int32_t>::min()});
  writer.add("u8", {GgufType::kUint8, GgufType::kUint8, int64_t{255}});
  writer.add("i8", {GgufType::kInt8, GgufType::kUint8, int64_t{-128}});
  writer.add("u16", {GgufType::kUint16, GgufType::kUint8, int64_t{65535}});
  writer.add("i16", {GgufType::kInt16, GgufType::kUint8, int64_t{-32768}});
  writer.add("u64", {GgufType::kUint64, GgufType::kUint8, ~uint64_t{0}});
  writer.add("i64", {GgufType::kInt64, GgufType::kUint8, std::numeric_limits<int64_t>::min()});
  writer.add("f64", {GgufType::kFloat64, GgufType::kUint8, 1e-300});
  const GgufValue inner{GgufType::kArray, GgufType::kUint16,
                        std::vector<GgufValue>{{GgufType::kUint16, GgufType::kUint8, int64_t{9}}}};
  writer.add("nested", {GgufType::kArray, GgufType::kArray, std::vector<GgufValue>{inner, inner}});

  std::vector<std::string> tensor_bytes;
  auto add = [&](const char* name, GgmlType type, std::vector<int64_t> shape, size_t bytes) {
    std::string b;
    for (size_t i = 0; i < bytes; ++i) b.push_back(static_cast<char>(i * 7 + tensor_bytes.size()));
    tensor_bytes.push_back(b);
    writer.add_tensor(name, type, shape, to_bytes(b));
  };
  add("f32", GgmlType::kF32, {5}, 20);
  add("f16", GgmlType::kF16, {3, 2}, 12);
  add("bf16", GgmlType::kBF16, {2, 1, 3}, 12);
  add("four", GgmlType::kF32, {1, 2, 1, 2}, 16);
  add("q4_0", GgmlType::kQ4_0, {2, 64}, 2 * 2 * 18);  // two rows of two blocks
  add("empty", GgmlType::kF32, {0, 4}, 0);
  TempDir dir;
  writer.write(dir / "w.gguf");

  const auto file = GgufFile::open(dir / "w.gguf");
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->find("general.alignment"), nullptr);  // the default is not written
  EXPECT_EQ(file->get_string("s"), "h\xc3\xa9llo");
  EXPECT_EQ(file->get_int("u32"), 4000000000ll);
  EXPECT_EQ(file->get_int("i32"), -7);
  EXPECT_EQ(file->get_float("f32"), double{0.1f});
  EXPECT_EQ(file->get_bool("b"), true);
  EXPECT_THAT(*file->get_string_array("ss"), ElementsAre("a", "", "ccc"));
  EXPECT_THAT(*file->get_float_array("fs"), ElementsAre(1.5f, -0.0f));
  EXPECT_THAT(*file->get_int_array("is"), ElementsAre(1, -2, std::numeric_limits<int32_t>::min()));
  EXPECT_EQ(file->get_int("u8"), 255);
  EXPECT_EQ(file->get_int("i8"), -128);
  EXPECT_EQ(file->get_int("u16"), 65535);
  EXPECT_EQ(file->get_int("i16"), -32768);
  EXPECT_EQ(std::get<uint64_t>(file->find("u64")->value), ~uint64_t{0});
  EXPECT_EQ(file->get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(file->get_float("f64"), 1e-300);
  EXPECT_EQ(file->find("f64")->type, GgufType::kFloat64);
  const auto& nested = std::get<std::vector<GgufValue>>(file->find("nested")->value);
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[1].element_type, GgufType::kUint16);
  EXPECT_EQ(std::get<int64_t>(std::get<std::vector<GgufValue>>(nested[1].value).at(0).value), 9);

  const std::pair<const char*, std::vector<int64_t>> shapes[] = {
      {"f32", {5}},           {"f16", {3, 2}},   {"bf16", {2, 1, 3}},
      {"four", {1, 2, 1, 2}}, {"q4_0", {2, 64}}, {"empty", {0, 4}}};
  ASSERT_EQ(file->tensors().size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const GgufTensor& t = *file->find_tensor(shapes[i].first);
    EXPECT_EQ(t.shape(), shapes[i].second) << t.name;
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    ASSERT_EQ(t.num_bytes, tensor_bytes[i].size()) << t.name;
    EXPECT_EQ(std::memcmp(t.data, tensor_bytes[i].data(), t.num_bytes), 0) << t.name;
  }
  EXPECT_EQ(ggml_type_name(file->find_tensor("q4_0")->type), "Q4_0");
  EXPECT_EQ(file->view(*file->find_tensor("bf16")).dtype, DType::BF16);
}

TEST(GgufWriter, CustomAlignmentIsWrittenAndHonoured) {
  GgufWriter writer(4096);
  writer.add_string("a", "x");
  writer.add_tensor("t0", GgmlType::kF32, {1}, to_bytes(Bytes().f32(1.0f)));
  writer.add_tensor("t1", GgmlType::kF32, {1}, to_bytes(Bytes().f32(2.0f)));
  TempDir dir;
  writer.write(dir / "w.gguf");
  const auto file = GgufFile::open(dir / "w.gguf");
  EXPECT_EQ(file->alignment(), 4096u);
  EXPECT_EQ(file->get_int("general.alignment"), 4096);
  EXPECT_EQ(file->find_tensor("t1")->offset, 4096u);
  EXPECT_THAT(to_f32(file->view(*file->find_tensor("t1"))), ElementsAre(2.0f));
  // Data section at 4096, two tensors each padded to 4096.
  EXPECT_EQ(std::filesystem::file_size(dir / "w.gguf"), 3u * 4096);
}

template <typename Call>
std::string invalid_message(Call call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no std::invalid_argument";
}

TEST(GgufWriter, RefusesWhatTheReaderWouldReject) {
  GgufWriter w;
  w.add_uint32("k", 1);
  w.add_tensor("t", GgmlType::kF32, {1}, to_bytes(Bytes().f32(0)));
  const std::vector<std::byte> four(4);
  EXPECT_THAT(invalid_message([&] { w.add_bool("k", true); }), HasSubstr("k: duplicate"));
  EXPECT_THAT(invalid_message([&] { w.add_uint32("general.alignment", 64); }),
              HasSubstr("constructor"));
  EXPECT_THAT(invalid_message([&] {
                w.add("x", {GgufType::kUint8, GgufType::kUint8, 256l});
              }),
              HasSubstr("256 does not fit in uint8"));
  EXPECT_THAT(invalid_message([&] {
                w.add("x", {GgufType::kInt8, GgufType::kUint8, -129l});
              }),
              HasSubstr("does not fit in int8"));
  EXPECT_THAT(invalid_message([&] {
                w.add("x", {GgufType::kString, GgufType::kUint8, 1.0});
              }),
              HasSubstr("must hold a std::string"));
  EXPECT_THAT(invalid_message([&] {
                w.add("x", {GgufType::kArray, GgufType::kString,
                            std::vector<GgufValue>{{GgufType::kUint8, GgufType::kUint8, 1l}}});
              }),
              HasSubstr("array of string has an element of type uint8"));
  EXPECT_THAT(invalid_message([&] {
                w.add("x", {static_cast<GgufType>(13), GgufType::kUint8, 1l});
              }),
              HasSubstr("unknown value type 13"));
  EXPECT_THAT(invalid_message([&] { w.add_tensor("t", GgmlType::kF32, {1}, four); }),
              HasSubstr("duplicate tensor name"));
  EXPECT_THAT(invalid_message([&] { w.add_tensor("u", GgmlType::kF32, {2}, four); }),
              HasSubstr("4 bytes given, the shape needs 8"));
  EXPECT_THAT(invalid_message([&] { w.add_tensor("u", GgmlType::kF32, {}, four); }),
              HasSubstr("0 dimensions"));
  EXPECT_THAT(invalid_message([&] {
                w.add_tensor("u", GgmlType::kF32, {1, 1, 1, 1, 1}, four);
              }),
              HasSubstr("5 dimensions"));
  EXPECT_THAT(invalid_message([&] {
                w.add_tensor("u", GgmlType::kQ4_0, {1, 33}, four);
              }),
              HasSubstr("33 is not a valid row of Q4_0"));
  EXPECT_THAT(invalid_message([&] {
                w.add_tensor("u", GgmlType::kF32, {-1, 1}, four);
              }),
              HasSubstr("negative"));

  TempDir dir;
  EXPECT_THAT(invalid_message([&] { GgufWriter(48).write(dir / "x.gguf"); }),
              HasSubstr("48 is not a power of two"));
  EXPECT_THROW(w.write(dir / "no_such_dir" / "x.gguf"), std::runtime_error);
}

}  // namespace
}  // namespace pagedserve::model
