// GgufFile on malformed input, built byte by byte with the test's GgufBuilder: one test per
// problem (each must be a ModelError naming the file and the problem), every prefix of a valid
// file, and a seeded mutation fuzz over the header, metadata and tensor infos, where each
// mutant must either open (and then view cleanly) or throw ModelError, never crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <random>

#include "model/loader/gguf.h"
#include "model/loader/model_error.h"
#include "tests/model/loader/gguf_test_util.h"
#include "tests/model/loader/loader_test_util.h"

namespace pagedserve::model {
namespace {

using testing::Bytes;
using testing::GgufBuilder;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_file;
namespace raw = testing::gguf_raw;

// Opens `bytes` as a file expecting a ModelError; returns its message after checking it names
// the file.
std::string open_error(const std::string& bytes) {
  TempDir dir;
  const std::filesystem::path path = dir / "bad.gguf";
  write_file(path, bytes);
  try {
    GgufFile::open(path);
  } catch (const ModelError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr(path.string() + ": "));
    return message;
  }
  ADD_FAILURE() << "expected ModelError";
  return "";
}

// An in-memory file (memfd) reopened by path through /proc/self/fd: the sweeps below open
// thousands of variants, and going through the disk would make them slow on a loaded machine.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("gguf_test", MFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }
  void write(const std::string& bytes) const {
    if (::ftruncate(fd_, 0) != 0 ||
        ::pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      throw std::runtime_error("cannot write the memfd");
    }
  }

 private:
  int fd_;
};

// A small valid file: a few metadata kinds and two tensors.
GgufBuilder small_file() {
  GgufBuilder b;
  b.kv("general.architecture", raw::kString, Bytes().str("llama"))
      .kv("n", raw::kU32, Bytes().u32(3))
      .kv("tokens", raw::kArray, Bytes().array(raw::kString, 3).str("a").str("bc").str(""))
      .kv("scores", raw::kArray, Bytes().array(raw::kF32, 2).f32(1.0f).f32(2.0f))
      .tensor("w", {2, 2}, raw::kTypeF32, 0)
      .tensor("h", {4}, raw::kTypeF16, 32);
  b.data = std::string(Bytes().f32(1).f32(2).f32(3).f32(4)) + std::string(16, '\0') +
           std::string(Bytes().u16(0x3c00).u16(0).u16(0).u16(0xc000));
  return b;
}

// One tensor of `type` and ne with `data_bytes` bytes of data at `offset`.
std::string one_tensor(uint32_t type, const std::vector<uint64_t>& ne, uint64_t offset,
                       size_t data_bytes) {
  GgufBuilder b;
  b.tensor("t", ne, type, offset);
  b.data = std::string(data_bytes, '\x11');
  return b.build();
}

TEST(GgufErrors, FileLevelProblems) {
  TempDir dir;
  const auto missing = [&] { GgufFile::open(dir / "nope.gguf"); };
  EXPECT_THAT(missing, ::testing::ThrowsMessage<ModelError>(HasSubstr("file not found")));
  EXPECT_THAT([&] { GgufFile::open(dir.path()); },
              ::testing::ThrowsMessage<ModelError>(HasSubstr("not a regular file")));
  EXPECT_THAT(open_error(""), HasSubstr("file is 0 bytes, too short"));
  EXPECT_THAT(open_error("GGUF"), HasSubstr("file is 4 bytes, too short"));

  std::string bad = small_file().build();
  bad[3] = 'X';
  EXPECT_THAT(open_error(bad), HasSubstr("bad magic \"GGUX\""));
  bad = small_file().build();
  bad[0] = '\x01';
  EXPECT_THAT(open_error(bad), HasSubstr("bad magic \"\\x01GUF\""));

  GgufBuilder v1 = small_file();
  v1.version = 1;
  EXPECT_THAT(open_error(v1.build()), HasSubstr("GGUF version 1 is not supported"));
  GgufBuilder v4 = small_file();
  v4.version = 4;
  EXPECT_THAT(open_error(v4.build()), HasSubstr("unsupported GGUF version 4 (supported: 2 and 3)"));
  GgufBuilder big_endian = small_file();
  big_endian.version = 0x03000000;
  EXPECT_THAT(open_error(big_endian.build()),
              HasSubstr("unsupported GGUF version 50331648 (a big-endian file?"));
}

TEST(GgufErrors, HugeCountsAndLengthsAreRefusedBeforeAllocating) {
  const uint64_t huge = uint64_t{1} << 60;
  GgufBuilder many_keys;
  many_keys.metadata_count = huge;
  EXPECT_THAT(open_error(many_keys.build()),
              HasSubstr("metadata count 1152921504606846976 cannot fit"));
  GgufBuilder many_tensors;
  many_tensors.tensor_count = huge;
  EXPECT_THAT(open_error(many_tensors.build()),
              HasSubstr("tensor count 1152921504606846976 cannot fit"));

  // A key whose length prefix is 2^60 (the builder writes the real key after it).
  std::string long_key = GgufBuilder().kv("k", raw::kU8, Bytes().u8(1)).build();
  std::memcpy(long_key.data() + 24, Bytes().u64(huge).str().data(), 8);
  EXPECT_THAT(open_error(long_key),
              HasSubstr("metadata entry 0: truncated file: metadata key needs "
                        "1152921504606846976 bytes at offset 32"));

  EXPECT_THAT(open_error(GgufBuilder().kv("s", raw::kString, Bytes().u64(huge)).build()),
              HasSubstr("metadata key s: truncated file: string needs 1152921504606846976"));
  EXPECT_THAT(open_error(GgufBuilder().kv("s", raw::kString, Bytes().u64(~0ull)).build()),
              HasSubstr("truncated file: string needs 18446744073709551615"));
  for (uint32_t element : {raw::kU8, raw::kString, raw::kArray}) {
    const std::string file =
        GgufBuilder().kv("a", raw::kArray, Bytes().array(element, huge).u8(0)).build();
    EXPECT_THAT(open_error(file), HasSubstr("metadata key a: array of 1152921504606846976"));
  }
  // 100 strings claimed, 99 bytes of room: refused by the count check, not by running out.
  EXPECT_THAT(
      open_error(GgufBuilder()
                     .kv("a", raw::kArray, Bytes().array(raw::kString, 100).raw(std::string(99, 0)))
                     .build()),
      HasSubstr("array of 100 string values cannot fit in the 99 bytes left"));
}

TEST(GgufErrors, BadMetadataValues) {
  EXPECT_THAT(open_error(GgufBuilder().kv("k", 13, Bytes().u8(0)).build()),
              HasSubstr("metadata key k: unknown value type 13"));
  EXPECT_THAT(open_error(GgufBuilder().kv("k", 0xffffffffu, "").build()),
              HasSubstr("unknown value type 4294967295"));
  EXPECT_THAT(open_error(GgufBuilder().kv("k", raw::kArray, Bytes().array(99, 0)).build()),
              HasSubstr("metadata key k: unknown array element type 99"));
  EXPECT_THAT(open_error(GgufBuilder().kv("k", raw::kBool, Bytes().u8(2)).build()),
              HasSubstr("metadata key k: bool value 2 is neither 0 nor 1"));
  EXPECT_THAT(open_error(GgufBuilder()
                             .kv("k", raw::kU8, Bytes().u8(1))
                             .kv("j", raw::kU8, Bytes().u8(1))
                             .kv("k", raw::kString, Bytes().str("x"))
                             .build()),
              HasSubstr("metadata key k: duplicate metadata key"));
  // Arrays nested 8 deep parse; 9 deep is refused.
  auto nested = [](int depth) {
    Bytes b;
    for (int i = 1; i < depth; ++i) b.array(raw::kArray, 1);
    b.array(raw::kU8, 1).u8(7);
    return GgufBuilder().kv("deep", raw::kArray, b).build();
  };
  TempDir dir;
  write_file(dir / "ok.gguf", nested(8));
  EXPECT_NO_THROW(GgufFile::open(dir / "ok.gguf"));
  EXPECT_THAT(open_error(nested(9)), HasSubstr("arrays nested more than 8 deep"));
}

TEST(GgufErrors, BadAlignment) {
  for (uint32_t alignment : {0u, 3u, 48u, 0x80000001u}) {
    EXPECT_THAT(
        open_error(
            GgufBuilder().kv("general.alignment", raw::kU32, Bytes().u32(alignment)).build()),
        HasSubstr("metadata key general.alignment: alignment " + std::to_string(alignment) +
                  " is not a power of two"));
  }
  EXPECT_THAT(open_error(GgufBuilder().kv("general.alignment", raw::kU64, Bytes().u64(64)).build()),
              HasSubstr("general.alignment: has type uint64, expected uint32"));
}

TEST(GgufErrors, BadTensorInfos) {
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {}, 0, 0)),
              HasSubstr("tensor info 0 (t): has 0 dimensions"));
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {1, 1, 1, 1, 1}, 0, 4)),
              HasSubstr("has 5 dimensions"));
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {1ull << 63}, 0, 4)),
              HasSubstr("dimension 0 is 9223372036854775808 (above INT64_MAX)"));
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {1ull << 31, 1ull << 31, 1ull << 31}, 0, 4)),
              HasSubstr("overflows its size"));
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {1ull << 62}, 0, 4)),
              HasSubstr("overflows its size"));
  for (uint32_t type : {4u, 31u, 42u, 1000u}) {
    EXPECT_THAT(open_error(one_tensor(type, {32}, 0, 64)),
                HasSubstr("tensor info 0 (t): unknown ggml tensor type " + std::to_string(type)));
  }
  EXPECT_THAT(open_error(one_tensor(raw::kTypeQ4_0, {33}, 0, 64)),
              HasSubstr("ne[0] = 33 is not a multiple of Q4_0's block size 32"));

  GgufBuilder twice;
  twice.tensor("t", {1}, raw::kTypeF32, 0).tensor("t", {1}, raw::kTypeF32, 32);
  twice.data = std::string(36, '\0');
  EXPECT_THAT(open_error(twice.build()), HasSubstr("tensor info 1 (t): duplicate tensor name"));
}

TEST(GgufErrors, TensorDataOutsideTheFileOrMisaligned) {
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {4}, 0, 15)),  // one byte short
              HasSubstr("tensor t: data at offset 0 (16 bytes of F32) runs past the end"));
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {1}, 64, 36)), HasSubstr("runs past the end"));
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {1}, ~0ull - 31, 64)),
              HasSubstr("runs past the end"));  // offset + size overflows 64 bits
  EXPECT_THAT(open_error(one_tensor(raw::kTypeF32, {1}, 4, 64)),
              HasSubstr("tensor t: data offset 4 is not a multiple of the alignment 32"));
  GgufBuilder custom;
  custom.alignment = 64;
  custom.kv("general.alignment", raw::kU32, Bytes().u32(64)).tensor("t", {1}, raw::kTypeF32, 32);
  custom.data = std::string(128, '\0');
  EXPECT_THAT(open_error(custom.build()),
              HasSubstr("data offset 32 is not a multiple of the alignment 64"));
}

TEST(GgufErrors, ViewKeepsQuantizedBlocksAndRefusesTypesItCannotComputeWith) {
  GgufBuilder b;
  b.tensor("blk.0.attn_q.weight", {256, 2}, raw::kTypeQ4_K, 0)
      .tensor("ids", {2}, raw::kTypeI32, 288)
      .tensor("q41", {32}, 3 /* Q4_1 */, 320);
  b.data = std::string(320 + 20, '\0');
  TempDir dir;
  write_file(dir / "q.gguf", b.build());
  const auto file = GgufFile::open(dir / "q.gguf");
  const GgufTensor& q = *file->find_tensor("blk.0.attn_q.weight");
  EXPECT_EQ(q.num_bytes, 288u);
  const TensorView view = file->view(q);
  EXPECT_EQ(view.dtype, DType::Q4_K);
  EXPECT_EQ(view.shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(view.num_bytes, 288u);
  EXPECT_EQ(to_f32(view), std::vector<float>(512, 0.0f));  // all-zero blocks
  EXPECT_THAT([&] { file->view(*file->find_tensor("ids")); },
              ::testing::ThrowsMessage<ModelError>(HasSubstr("tensor ids has type I32")));
  EXPECT_THAT([&] { file->view(*file->find_tensor("q41")); },
              ::testing::ThrowsMessage<ModelError>(HasSubstr(
                  (dir / "q.gguf").string() + ": tensor q41 has type Q4_1, which this engine "
                                              "cannot compute with")));
}

TEST(GgufErrors, EveryPrefixOfAValidFileIsAnError) {
  const std::string whole = small_file().build();
  const MemoryFile file;
  file.write(whole);
  ASSERT_NO_THROW(GgufFile::open(file.path()));
  for (size_t length = 0; length < whole.size(); ++length) {
    file.write(whole.substr(0, length));
    EXPECT_THROW(GgufFile::open(file.path()), ModelError) << "prefix of " << length;
  }
}

// Opens a mutant; on success, reads every tensor through view()/to_f32 and every metadata
// value through the getters so that a bad pointer or size would be touched (and caught by ASan).
void open_and_touch(const std::filesystem::path& path) {
  const auto file = GgufFile::open(path);
  for (const auto& [name, tensor] : file->tensors()) {
    try {
      (void)to_f32(file->view(tensor));
    } catch (const ModelError&) {
    }
  }
  for (const auto& [key, value] : file->metadata()) {
    try {
      (void)file->get_int_array(key);
    } catch (const ModelError&) {
    }
    try {
      (void)file->get_string(key);
    } catch (const ModelError&) {
    }
  }
}

TEST(GgufErrors, SeededMutationsOpenOrThrowModelError) {
  const GgufBuilder builder = small_file();
  const std::string valid = builder.build();
  const size_t header_end = builder.infos_end();
  std::mt19937_64 rng(20261201);
  const uint64_t interesting[] = {
      0,          1,          2,          31,    32,         255,
      1ull << 31, 1ull << 32, 1ull << 60, ~0ull, ~0ull - 31, static_cast<uint64_t>(valid.size())};
  const MemoryFile file;
  int opened = 0;
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string mutant = valid;
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) {
      const size_t at = rng() % header_end;
      switch (rng() % 4) {
        case 0:  // one random byte
          mutant[at] = static_cast<char>(rng());
          break;
        case 1:  // one bit
          mutant[at] = static_cast<char>(mutant[at] ^ (1 << (rng() % 8)));
          break;
        case 2: {  // a 64-bit length or offset somewhere
          const uint64_t v = rng() % 2 ? interesting[rng() % std::size(interesting)] : rng();
          for (size_t i = 0; i < 8 && at + i < mutant.size(); ++i) {
            mutant[at + i] = static_cast<char>(v >> (8 * i));
          }
          break;
        }
        case 3:  // cut or extend the file
          mutant.resize(rng() % (valid.size() + 64), '\x5a');
          break;
      }
    }
    file.write(mutant);
    try {
      open_and_touch(file.path());
      ++opened;
    } catch (const ModelError&) {
      ++refused;
    }
  }
  // Both outcomes occur, so the mutations neither all miss nor all break the file.
  EXPECT_GT(opened, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace pagedserve::model
