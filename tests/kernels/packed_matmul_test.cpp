// matmul_packed against two independent references: a naive double-precision x * w^T (the
// math) and a scalar std::fma chain over k (the batch-invariance contract, bit for bit), for
// every ISA this CPU supports, every weight dtype, odd shapes, batch sizes and thread counts.
#include "kernels/cpu/packed_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::random_floats;

// Random weights in `dtype`: the raw bytes to pack and their exact float values. 16-bit values
// are drawn as bit patterns of normal numbers of magnitude about 2^-3..2^2.
struct RandomWeight {
  std::vector<unsigned char> bytes;
  std::vector<float> values;
};

RandomWeight random_weight(std::mt19937& rng, WeightDtype dtype, size_t count) {
  RandomWeight w;
  w.values.resize(count);
  w.bytes.resize(count * weight_dtype_size(dtype));
  std::uniform_int_distribution<int> bit(0, 1);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == WeightDtype::kF32) {
      w.values[i] = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      std::memcpy(&w.bytes[i * 4], &w.values[i], 4);
      continue;
    }
    uint16_t h;
    if (dtype == WeightDtype::kF16) {  // value = (1 + mantissa / 1024) * 2^(exponent - 15)
      const int exponent = std::uniform_int_distribution<int>(12, 17)(rng);
      const int mantissa = std::uniform_int_distribution<int>(0, 1023)(rng);
      h = static_cast<uint16_t>((bit(rng) << 15) | (exponent << 10) | mantissa);
      w.values[i] = std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15) * ((h >> 15) ? -1 : 1);
    } else {  // BF16: value = (1 + mantissa / 128) * 2^(exponent - 127)
      const int exponent = std::uniform_int_distribution<int>(124, 129)(rng);
      const int mantissa = std::uniform_int_distribution<int>(0, 127)(rng);
      h = static_cast<uint16_t>((bit(rng) << 15) | (exponent << 7) | mantissa);
      w.values[i] = std::ldexp(1.0f + mantissa / 128.0f, exponent - 127) * ((h >> 15) ? -1 : 1);
    }
    std::memcpy(&w.bytes[i * 2], &h, 2);
  }
  return w;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

struct Shape {
  int m, n, k;
};

void check(const Shape& s, WeightDtype dtype, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k
                                    << " dtype=" << static_cast<int>(dtype));
  const auto x = random_floats(rng, static_cast<size_t>(s.m) * s.k);
  const RandomWeight w = random_weight(rng, dtype, static_cast<size_t>(s.n) * s.k);
  const PackedWeight packed = PackedWeight::pack(w.bytes.data(), dtype, s.n, s.k);
  EXPECT_EQ(packed.weight_bytes(), w.bytes.size());

  // The contract: one sequential fma chain per output element.
  std::vector<float> chain(static_cast<size_t>(s.m) * s.n);
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      float acc = 0.0f;
      for (int kk = 0; kk < s.k; ++kk) acc = std::fma(x[i * s.k + kk], w.values[j * s.k + kk], acc);
      chain[static_cast<size_t>(i) * s.n + j] = acc;
    }
  }
  // The math, in double, with a tolerance from the magnitudes summed.
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int kk = 0; kk < s.k; ++kk) {
        const double prod = static_cast<double>(x[i * s.k + kk]) * w.values[j * s.k + kk];
        sum += prod;
        magnitude += std::fabs(prod);
      }
      ASSERT_LE(std::fabs(chain[static_cast<size_t>(i) * s.n + j] - sum), 1e-6 * magnitude + 1e-30);
    }
  }

  static ThreadPool pool3(3, /*min_parallel_flops=*/0.0);
  for (Isa isa : supported_isas()) {
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
      SCOPED_TRACE(::testing::Message()
                   << "isa=" << isa_name(isa) << " threads=" << (pool ? pool->num_threads() : 1));
      std::vector<float> out(chain.size(), std::nanf(""));
      matmul_packed(x.data(), packed, out.data(), s.m, pool, isa);
      for (size_t e = 0; e < out.size(); ++e) {
        ASSERT_EQ(std::memcmp(&out[e], &chain[e], sizeof(float)), 0)
            << "element " << e << ": got " << out[e] << ", fma chain gives " << chain[e];
      }
      // Each row alone (batch 1) gives the same bits as inside the batch.
      if (s.m > 1) {
        const int row = s.m / 2;
        std::vector<float> alone(s.n, std::nanf(""));
        matmul_packed(x.data() + static_cast<size_t>(row) * s.k, packed, alone.data(), 1, pool,
                      isa);
        EXPECT_EQ(
            std::memcmp(alone.data(), &out[static_cast<size_t>(row) * s.n], s.n * sizeof(float)),
            0);
      }
    }
  }
}

const Shape kShapes[] = {{1, 1, 1},     {1, 7, 3},     {2, 9, 5},     {3, 65, 9},   {5, 64, 17},
                         {6, 63, 33},   {7, 128, 64},  {13, 129, 40}, {1, 300, 96}, {8, 70, 1},
                         {12, 100, 31}, {33, 17, 100}, {2, 31, 7},    {4, 33, 2}};

TEST(MatmulPacked, F32MatchesTheFmaChainOnEveryIsa) {
  std::mt19937 rng(1);
  for (const Shape& s : kShapes) {
    check(s, WeightDtype::kF32, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(MatmulPacked, F16WidenedInRegistersMatchesTheFmaChain) {
  std::mt19937 rng(2);
  for (const Shape& s : kShapes) {
    check(s, WeightDtype::kF16, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(MatmulPacked, Bf16WidenedInRegistersMatchesTheFmaChain) {
  std::mt19937 rng(3);
  for (const Shape& s : kShapes) {
    check(s, WeightDtype::kBF16, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(MatmulPacked, RandomShapes) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 30; ++trial) {
    const Shape s{testing::random_int(rng, 1, 20), testing::random_int(rng, 1, 200),
                  testing::random_int(rng, 1, 300)};
    check(s, static_cast<WeightDtype>(trial % 3), rng);
    if (HasFatalFailure()) return;
  }
}

TEST(MatmulPacked, ZeroKYieldsZerosAndZeroRowsWriteNothing) {
  const PackedWeight empty_k = PackedWeight::pack(nullptr, WeightDtype::kF32, 5, 0);
  std::vector<float> out(10, 7.0f);
  const float dummy = 1.0f;
  for (Isa isa : supported_isas()) {
    matmul_packed(&dummy, empty_k, out.data(), 2, nullptr, isa);
    for (float v : out) EXPECT_EQ(v, 0.0f) << isa_name(isa);
  }
  float untouched = 3.0f;
  matmul_packed(nullptr, empty_k, &untouched, 0);
  EXPECT_EQ(untouched, 3.0f);
}

TEST(MatmulPacked, ThisMachineReportsItsIsa) {
  // Not an assertion about the machine: a record in the test log of which paths ran.
  for (Isa isa : supported_isas()) std::printf("supported: %s\n", isa_name(isa));
  std::printf("best: %s\n", isa_name(best_isa()));
  EXPECT_TRUE(isa_supported(best_isa()));
}

}  // namespace
}  // namespace pagedserve::kernels
