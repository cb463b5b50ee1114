// Tests for SafetensorsFile, to_f32 and WeightStore: dtype widening against known bit
// patterns, and one test per malformed input (each must be a ModelError naming the file and
// the problem), plus truncation and byte-flip sweeps that must never crash.
#include "model/loader/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "model/loader/model_error.h"
#include "tests/model/loader/loader_test_util.h"

namespace pagedserve::model {
namespace {

using testing::f32_bytes;
using ::testing::HasSubstr;
using testing::RawTensor;
using testing::TempDir;
using testing::u16_bytes;
using testing::write_file;
using testing::write_raw_safetensors;
using testing::write_safetensors;

// Opens `path` expecting a ModelError; returns its message after checking it names the file.
std::string open_error(const std::filesystem::path& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const ModelError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr(path.string() + ": "));
    return message;
  }
  ADD_FAILURE() << "expected ModelError for " << path;
  return "";
}

std::string raw_error(const std::string& header, const std::string& data) {
  TempDir dir;
  write_raw_safetensors(dir / "x.safetensors", header, data);
  return open_error(dir / "x.safetensors");
}

// Compares bit for bit so that -0.0 and NaN payloads are checked too.
void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << "element " << i;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
          << "element " << i << ": " << actual[i] << " vs " << expected[i];
    }
  }
}

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::F32), "F32");
  EXPECT_STREQ(dtype_name(DType::F16), "F16");
  EXPECT_STREQ(dtype_name(DType::BF16), "BF16");
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
}

TEST(Safetensors, ReadsAllDtypes) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> f32 = {1.0f, -2.5f, 65504.0f, 1e-40f, kInf, -0.0f};
  // IEEE half bit patterns and their exact values: 1, -2.5, max normal, smallest subnormal
  // (2^-24), largest subnormal (1023 * 2^-24), smallest normal (2^-14), 1/3 rounded, -0,
  // +inf, -inf, NaN.
  const std::vector<uint16_t> f16 = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400,
                                     0x3555, 0x8000, 0x7C00, 0xFC00, 0x7E00};
  const std::vector<float> f16_expected = {1.0f,
                                           -2.5f,
                                           65504.0f,
                                           5.9604644775390625e-08f,
                                           6.097555160522461e-05f,
                                           6.103515625e-05f,
                                           0.333251953125f,
                                           -0.0f,
                                           kInf,
                                           -kInf,
                                           std::numeric_limits<float>::quiet_NaN()};
  // bfloat16: 1, -2.5, 3.140625, largest finite, a subnormal (bits 0x00010000), +inf, NaN.
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC020, 0x4049, 0x7F7F, 0x0001, 0x7F80, 0x7FC0};
  const std::vector<float> bf16_expected = {1.0f,
                                            -2.5f,
                                            3.140625f,
                                            3.3895313892515355e+38f,
                                            9.183549615799121e-41f,
                                            kInf,
                                            std::numeric_limits<float>::quiet_NaN()};

  TempDir dir;
  const auto path = dir / "mixed.safetensors";
  write_safetensors(path, {{"a.f32", "F32", {2, 3}, f32_bytes(f32)},
                           {"b.f16", "F16", {11}, u16_bytes(f16)},
                           {"c.bf16", "BF16", {7, 1}, u16_bytes(bf16)},
                           {"d.scalar", "F32", {}, f32_bytes({42.0f})},
                           {"e.empty", "F16", {0, 5}, ""}});
  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->path(), path);
  ASSERT_EQ(file->tensors().size(), 5u);

  const TensorView& a = file->tensors().at("a.f32");
  EXPECT_EQ(a.name, "a.f32");
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.num_elements(), 6);
  EXPECT_EQ(a.num_bytes, 24u);
  EXPECT_EQ(a.file, path);
  expect_same_bits(to_f32(a), f32);

  const TensorView& b = file->tensors().at("b.f16");
  EXPECT_EQ(b.dtype, DType::F16);
  expect_same_bits(to_f32(b), f16_expected);
  const TensorView& c = file->tensors().at("c.bf16");
  EXPECT_EQ(c.dtype, DType::BF16);
  expect_same_bits(to_f32(c), bf16_expected);

  EXPECT_EQ(file->tensors().at("d.scalar").num_elements(), 1);
  expect_same_bits(to_f32(file->tensors().at("d.scalar")), {42.0f});
  EXPECT_EQ(file->tensors().at("e.empty").num_elements(), 0);
  EXPECT_TRUE(to_f32(file->tensors().at("e.empty")).empty());
}

TEST(Safetensors, EveryHalfValueMatchesTheFormula) {
  // (-1)^s * 2^(e-15) * (1 + m/1024) for normals, 2^-14 * m/1024 for subnormals.
  std::vector<uint16_t> all;
  std::vector<float> expected;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint32_t e = (bits >> 10) & 0x1f;
    const uint32_t m = bits & 0x3ff;
    if (e == 0x1f) continue;  // inf/NaN checked above
    const double magnitude = e == 0 ? std::ldexp(m / 1024.0, -14)
                                    : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15);
    all.push_back(static_cast<uint16_t>(bits));
    expected.push_back(static_cast<float>((bits & 0x8000) ? -magnitude : magnitude));
  }
  TempDir dir;
  write_safetensors(dir / "h.safetensors",
                    {{"h", "F16", {static_cast<int64_t>(all.size())}, u16_bytes(all)}});
  const auto file = SafetensorsFile::open(dir / "h.safetensors");
  expect_same_bits(to_f32(file->tensors().at("h")), expected);
}

TEST(Safetensors, MetadataIsAllowed) {
  nlohmann::json header = testing::safetensors_header({{"w", "F32", {1}, f32_bytes({3.0f})}});
  header["__metadata__"] = {{"format", "pt"}};
  TempDir dir;
  // Writers pad the header with spaces to an 8-byte boundary; that must parse.
  write_raw_safetensors(dir / "m.safetensors", header.dump() + "     ", f32_bytes({3.0f}));
  const auto file = SafetensorsFile::open(dir / "m.safetensors");
  ASSERT_EQ(file->tensors().size(), 1u);
  expect_same_bits(to_f32(file->tensors().at("w")), {3.0f});
}

TEST(Safetensors, MissingFile) {
  TempDir dir;
  EXPECT_THAT(open_error(dir / "nope.safetensors"), HasSubstr("file not found"));
  EXPECT_THAT(open_error(dir.path()), HasSubstr("not a regular file"));
}

TEST(Safetensors, TooShortForHeaderLength) {
  TempDir dir;
  write_file(dir / "x.safetensors", "");
  EXPECT_THAT(open_error(dir / "x.safetensors"), HasSubstr("file is 0 bytes, too short"));
  write_file(dir / "x.safetensors", "abc");
  EXPECT_THAT(open_error(dir / "x.safetensors"), HasSubstr("file is 3 bytes, too short"));
}

TEST(Safetensors, HeaderLengthZeroOrTooLarge) {
  TempDir dir;
  write_file(dir / "x.safetensors", testing::le_u64(0) + "{}");
  EXPECT_THAT(open_error(dir / "x.safetensors"), HasSubstr("header length is 0"));
  write_file(dir / "x.safetensors", testing::le_u64(1000) + "{}");
  EXPECT_THAT(open_error(dir / "x.safetensors"),
              HasSubstr("header length 1000 exceeds file size 10"));
  write_file(dir / "x.safetensors", testing::le_u64(~0ull) + "{}");
  EXPECT_THAT(open_error(dir / "x.safetensors"), HasSubstr("exceeds the 104857600-byte limit"));
}

TEST(Safetensors, CorruptHeaderJson) {
  EXPECT_THAT(raw_error("{\"w\": {\"dtype\": ", ""), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(raw_error(std::string("\0\0\0\0", 4), ""), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(raw_error("[1, 2]", ""), HasSubstr("header must be a JSON object, got array"));
  EXPECT_THAT(raw_error(R"({"w": 5})", ""), HasSubstr("tensor w: header entry must be an object"));
  EXPECT_THAT(raw_error(R"({"__metadata__": 5})", ""), HasSubstr("__metadata__ must be"));
  // Deep nesting is refused while parsing, before it can cost memory or stack.
  EXPECT_THAT(raw_error("{\"w\": " + std::string(1 << 20, '['), ""),
              HasSubstr("header is not valid JSON: nesting deeper than 8 levels"));
}

TEST(Safetensors, MissingOrMistypedEntryFields) {
  EXPECT_THAT(raw_error(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "abcd"),
              HasSubstr("tensor w: missing dtype"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", "abcd"),
              HasSubstr("tensor w: dtype must be a string"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", "abcd"),
              HasSubstr("tensor w: missing shape"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", "abcd"),
              HasSubstr("tensor w: shape must be an array"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "shape": [1]}})", "abcd"),
              HasSubstr("tensor w: missing data_offsets"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "abcd"),
              HasSubstr("data_offsets must be two non-negative integers"));
  EXPECT_THAT(
      raw_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", "abcd"),
      HasSubstr("data_offsets must be two non-negative integers"));
}

TEST(Safetensors, UnsupportedDtype) {
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})", "abcd"),
              HasSubstr("unsupported dtype I8 for tensor w"));
}

TEST(Safetensors, BadShape) {
  EXPECT_THAT(
      raw_error(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "abcd"),
      HasSubstr("shape entries must be non-negative integers"));
  EXPECT_THAT(
      raw_error(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "abcd"),
      HasSubstr("shape entries must be non-negative integers"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "abcd"),
              HasSubstr("tensor w: shape [2] of F32 needs 8 bytes but data_offsets [0, 4] hold 4"));
  // An element count that overflows 64 bits must be caught, not wrap around to a small size.
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296],
                                  "data_offsets": [0, 0]}})",
                        ""),
              HasSubstr("more than 2^64"));
}

TEST(Safetensors, OffsetsOutOfRange) {
  EXPECT_THAT(
      raw_error(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "abcd"),
      HasSubstr("tensor w: data_offsets [0, 8] out of range: the data section has 4 bytes"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})", "abcd"),
              HasSubstr("data_offsets [4, 0] are reversed"));
  EXPECT_THAT(raw_error(R"({"w": {"dtype": "F32", "shape": [1],
                                  "data_offsets": [18446744073709551612, 18446744073709551615]}})",
                        "abcd"),
              HasSubstr("out of range"));
}

TEST(Safetensors, OverlappingOffsets) {
  EXPECT_THAT(raw_error(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                        std::string(12, 'x')),
              HasSubstr("tensor b overlaps tensor a"));
  // Two names for the same bytes are an overlap too.
  EXPECT_THAT(raw_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                            "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                        std::string(4, 'x')),
              HasSubstr("overlaps"));
}

TEST(Safetensors, GapsAndTrailingBytes) {
  EXPECT_THAT(raw_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                            "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                        std::string(12, 'x')),
              HasSubstr("gap in data section: bytes 4..8 before tensor b"));
  EXPECT_THAT(raw_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                        std::string(6, 'x')),
              HasSubstr("data section has 6 bytes but tensors cover 4"));
}

// A well-formed file cut at every length must be rejected with a ModelError, never a crash.
TEST(Safetensors, EveryTruncationIsAnError) {
  TempDir dir;
  const auto whole = dir / "whole.safetensors";
  write_safetensors(whole, {{"a", "F32", {3}, f32_bytes({1, 2, 3})},
                            {"b", "BF16", {2}, u16_bytes({0x3F80, 0x4000})}});
  const std::string bytes = testing::read_file(whole);
  ASSERT_NO_THROW(SafetensorsFile::open(whole));
  const auto cut = dir / "cut.safetensors";
  for (size_t length = 0; length < bytes.size(); ++length) {
    write_file(cut, bytes.substr(0, length));
    EXPECT_THROW(SafetensorsFile::open(cut), ModelError) << "length " << length;
  }
  write_file(cut, bytes.substr(0, bytes.size() - 2));
  EXPECT_THAT(open_error(cut), HasSubstr("out of range"));
}

// Random byte flips (seeded, so failures reproduce): each file either opens with views that
// convert cleanly or fails with a ModelError.
TEST(Safetensors, RandomCorruptionNeverCrashes) {
  TempDir dir;
  const auto whole = dir / "whole.safetensors";
  write_safetensors(whole, {{"a", "F32", {2, 2}, f32_bytes({1, 2, 3, 4})},
                            {"b", "F16", {3}, u16_bytes({1, 2, 3})},
                            {"c", "BF16", {1}, u16_bytes({7})}});
  const std::string bytes = testing::read_file(whole);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<size_t> position(0, bytes.size() - 1);
  std::uniform_int_distribution<int> byte_value(0, 255);
  const auto path = dir / "fuzz.safetensors";
  int opened = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string mutated = bytes;
    const int flips = 1 + round % 4;
    for (int f = 0; f < flips; ++f) mutated[position(rng)] = static_cast<char>(byte_value(rng));
    write_file(path, mutated);
    try {
      const auto file = SafetensorsFile::open(path);
      for (const auto& [name, view] : file->tensors()) {
        EXPECT_EQ(to_f32(view).size(), static_cast<size_t>(view.num_elements()));
      }
      ++opened;
    } catch (const ModelError&) {
    }
  }
  // Flips in the data section leave the file valid, so some rounds must open.
  EXPECT_GT(opened, 0);
}

// to_f32_rows gives the same values as the literals ReadsAllDtypes checks, row range by row
// range, and refuses rows outside the tensor with an error that names it.
TEST(Safetensors, ToF32RowsConvertsTheRowsAskedFor) {
  const std::vector<float> f32 = {1.0f, -2.5f, 65504.0f, 1e-40f, 7.0f, -0.0f};
  const std::vector<uint16_t> f16 = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400};
  const std::vector<float> f16_values = {
      1.0f, -2.5f, 65504.0f, 5.9604644775390625e-08f, 6.097555160522461e-05f, 6.103515625e-05f};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC020, 0x4049, 0x7F7F};
  const std::vector<float> bf16_values = {1.0f, -2.5f, 3.140625f, 3.3895313892515355e+38f};
  TempDir dir;
  const auto path = dir / "rows.safetensors";
  write_safetensors(path, {{"a.f32", "F32", {3, 2}, f32_bytes(f32)},
                           {"b.f16", "F16", {2, 3}, u16_bytes(f16)},
                           {"c.bf16", "BF16", {4, 1}, u16_bytes(bf16)}});
  const auto file = SafetensorsFile::open(path);
  const struct {
    const char* name;
    int rows, cols;
    const std::vector<float>* values;
  } cases[] = {{"a.f32", 3, 2, &f32}, {"b.f16", 2, 3, &f16_values}, {"c.bf16", 4, 1, &bf16_values}};
  for (const auto& c : cases) {
    const TensorView& view = file->tensors().at(c.name);
    for (int first = 0; first <= c.rows; ++first) {
      for (int count = 0; first + count <= c.rows; ++count) {
        std::vector<float> got(static_cast<size_t>(count) * c.cols);
        to_f32_rows(view, first, count, got.data());
        expect_same_bits(got, std::vector<float>(c.values->begin() + first * c.cols,
                                                 c.values->begin() + (first + count) * c.cols));
      }
    }
    std::vector<float> room(16);
    try {
      to_f32_rows(view, c.rows - 1, 2, room.data());
      FAIL() << "expected ModelError for " << c.name;
    } catch (const ModelError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("tensor ") + c.name));
    }
    EXPECT_THROW(to_f32_rows(view, -1, 1, room.data()), ModelError);
  }
}

TEST(Safetensors, ToF32RejectsInconsistentView) {
  const std::vector<std::byte> bytes(4);
  TensorView view;
  view.name = "hand_built";
  view.file = "somewhere.safetensors";
  view.dtype = DType::F32;
  view.shape = {2};
  view.data = bytes.data();
  view.num_bytes = 4;  // shape needs 8
  try {
    to_f32(view);
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("somewhere.safetensors: tensor hand_built has 4 bytes"));
  }
  float row[2];
  EXPECT_THROW(to_f32_rows(view, 0, 1, row), ModelError);
  view.shape = {-1};
  EXPECT_THROW(to_f32(view), ModelError);
}

// ---- WeightStore ----

std::string store_error(const std::filesystem::path& dir) {
  try {
    WeightStore::open(dir);
  } catch (const ModelError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ModelError for " << dir;
  return "";
}

TEST(WeightStore, SingleFile) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {{"x", "F32", {2}, f32_bytes({1, 2})}});
  const WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(store.source(), dir / "model.safetensors");
  ASSERT_NE(store.find("x"), nullptr);
  EXPECT_EQ(store.find("y"), nullptr);
  EXPECT_EQ(to_f32(store.require("x", {2})), (std::vector<float>{1, 2}));
  try {
    store.require("y", {2});
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "model.safetensors").string() + ": missing tensor y"));
  }
  try {
    store.require("x", {1, 2});
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.safetensors: tensor x has shape [2], expected [1, 2]"));
  }
}

TEST(WeightStore, MissingDirectoryOrWeights) {
  TempDir dir;
  EXPECT_THAT(store_error(dir / "absent"), HasSubstr("absent: model directory not found"));
  EXPECT_THAT(
      store_error(dir.path()),
      HasSubstr(dir.path().string() + ": no model.safetensors or model.safetensors.index.json"));
}

// Writes two shards and an index mapping x, y -> shard 1 and z -> shard 2.
void write_sharded(const TempDir& dir) {
  write_safetensors(dir / "s1.safetensors",
                    {{"x", "F32", {1}, f32_bytes({1})}, {"y", "F16", {1}, u16_bytes({0x3C00})}});
  write_safetensors(dir / "s2.safetensors", {{"z", "BF16", {1}, u16_bytes({0xC020})}});
  testing::write_json(
      dir / "model.safetensors.index.json",
      {{"metadata", {{"total_size", 10}}},
       {"weight_map",
        {{"x", "s1.safetensors"}, {"y", "s1.safetensors"}, {"z", "s2.safetensors"}}}});
}

TEST(WeightStore, Sharded) {
  TempDir dir;
  write_sharded(dir);
  WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(store.source(), dir / "model.safetensors.index.json");
  EXPECT_EQ(store.require("x", {1}).file, dir / "s1.safetensors");
  EXPECT_EQ(store.require("z", {1}).file, dir / "s2.safetensors");
  EXPECT_EQ(to_f32(store.require("y", {1})), std::vector<float>{1.0f});
  EXPECT_EQ(to_f32(store.require("z", {1})), std::vector<float>{-2.5f});
  // The store stays valid after a move: views live in the heap-allocated files.
  const WeightStore moved = std::move(store);
  EXPECT_EQ(to_f32(moved.require("x", {1})), std::vector<float>{1.0f});
}

TEST(WeightStore, ShardFileMissing) {
  TempDir dir;
  write_sharded(dir);
  std::filesystem::remove(dir / "s2.safetensors");
  const std::string message = store_error(dir.path());
  EXPECT_THAT(message, HasSubstr((dir / "model.safetensors.index.json").string() +
                                 ": shard s2.safetensors listed in weight_map"));
  EXPECT_THAT(message, HasSubstr((dir / "s2.safetensors").string() + ": file not found"));
}

TEST(WeightStore, TensorMissingFromShard) {
  TempDir dir;
  write_sharded(dir);
  testing::write_json(dir / "model.safetensors.index.json",
                      {{"weight_map", {{"x", "s1.safetensors"}, {"z", "s1.safetensors"}}}});
  EXPECT_THAT(store_error(dir.path()),
              HasSubstr("model.safetensors.index.json: tensor z promised by weight_map is "
                        "missing from shard " +
                        (dir / "s1.safetensors").string()));
}

TEST(WeightStore, BadIndex) {
  TempDir dir;
  write_sharded(dir);
  const auto index = dir / "model.safetensors.index.json";
  write_file(index, "{not json");
  EXPECT_THAT(store_error(dir.path()), HasSubstr(index.string() + ": invalid JSON"));
  testing::write_json(index, {{"metadata", {}}});
  EXPECT_THAT(store_error(dir.path()), HasSubstr(index.string() + ": missing field weight_map"));
  testing::write_json(index, {{"weight_map", {1, 2}}});
  EXPECT_THAT(store_error(dir.path()), HasSubstr("field weight_map must be an object"));
  testing::write_json(index, {{"weight_map", {{"x", 1}}}});
  EXPECT_THAT(store_error(dir.path()), HasSubstr("weight_map entry for x must be a string"));
  testing::write_json(index, {{"weight_map", {{"x", "../s1.safetensors"}}}});
  EXPECT_THAT(store_error(dir.path()), HasSubstr("is not a file name in the model directory"));
  testing::write_json(index, {{"weight_map", {{"x", "/etc/passwd"}}}});
  EXPECT_THAT(store_error(dir.path()), HasSubstr("is not a file name in the model directory"));
}

}  // namespace
}  // namespace pagedserve::model
