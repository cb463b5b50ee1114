// LinearWeight: stacked projections whose parts have different formats (a Q4_K_M file's q/k
// in Q4_K beside v in Q6_K) write each part's columns where the stacked matrix has them, and
// online quantization picks the type (or keeps float) by the width.
#include "model/linear_weight.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace pagedserve::model {
namespace {

using kernels::QuantType;

struct OwnedView {
  std::vector<std::byte> bytes;
  TensorView view;
};

OwnedView quantized_view(QuantType type, int rows, int cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> values(static_cast<size_t>(rows) * cols);
  for (float& v : values) v = dist(rng);
  OwnedView owned;
  const size_t row_bytes = kernels::quant_row_bytes(type, cols);
  owned.bytes.resize(row_bytes * rows);
  for (int r = 0; r < rows; ++r) {
    kernels::quantize_row(type, values.data() + static_cast<size_t>(r) * cols,
                          owned.bytes.data() + r * row_bytes, cols);
  }
  owned.view.name = "part";
  owned.view.dtype = dtype_of(type);
  owned.view.shape = {rows, cols};
  owned.view.data = owned.bytes.data();
  owned.view.num_bytes = owned.bytes.size();
  return owned;
}

OwnedView float_view(int rows, int cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  OwnedView owned;
  owned.bytes.resize(static_cast<size_t>(rows) * cols * sizeof(float));
  for (size_t i = 0; i < owned.bytes.size() / sizeof(float); ++i) {
    const float v = dist(rng);
    std::memcpy(owned.bytes.data() + i * sizeof(float), &v, sizeof(float));
  }
  owned.view.name = "part";
  owned.view.shape = {rows, cols};
  owned.view.data = owned.bytes.data();
  owned.view.num_bytes = owned.bytes.size();
  return owned;
}

std::vector<float> random_rows(int m, int k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m) * k);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(LinearWeight, MixedQuantizedPartsWriteTheirOwnColumns) {
  std::mt19937 rng(7);
  constexpr int kCols = 512, kM = 3;
  const OwnedView q = quantized_view(QuantType::kQ4_K, 40, kCols, rng);
  const OwnedView v = quantized_view(QuantType::kQ6_K, 24, kCols, rng);
  const LinearWeight stacked = LinearWeight::from_views({&q.view, &v.view});
  EXPECT_EQ(stacked.rows(), 64);
  EXPECT_EQ(stacked.format_names(), (std::vector<std::string>{"Q4_K", "Q6_K"}));
  EXPECT_EQ(stacked.weight_bytes(), q.bytes.size() + v.bytes.size());

  const std::vector<float> x = random_rows(kM, kCols, rng);
  std::vector<float> out(kM * 64, NAN);
  stacked.forward(x.data(), out.data(), kM, nullptr, kernels::best_isa());
  const auto q_alone = kernels::QuantizedWeight::pack(q.view.data, QuantType::kQ4_K, 40, kCols);
  const auto v_alone = kernels::QuantizedWeight::pack(v.view.data, QuantType::kQ6_K, 24, kCols);
  std::vector<float> q_out(kM * 40), v_out(kM * 24);
  kernels::matmul_quantized(x.data(), q_alone, q_out.data(), kM, 40);
  kernels::matmul_quantized(x.data(), v_alone, v_out.data(), kM, 24);
  for (int r = 0; r < kM; ++r) {
    for (int c = 0; c < 64; ++c) {
      const float expected = c < 40 ? q_out[r * 40 + c] : v_out[r * 24 + c - 40];
      ASSERT_EQ(out[r * 64 + c], expected) << "row " << r << " column " << c;
    }
  }
  // And the product is the dequantized matrices' within the 8-bit activations' error.
  const std::vector<float> wq = to_f32(q.view);
  const std::vector<float> wv = to_f32(v.view);
  for (int r = 0; r < kM; ++r) {
    for (int c = 0; c < 64; ++c) {
      const float* w =
          c < 40 ? &wq[static_cast<size_t>(c) * kCols] : &wv[static_cast<size_t>(c - 40) * kCols];
      double exact = 0, bound = 1e-4;
      for (int kk = 0; kk < kCols; ++kk) {
        exact += static_cast<double>(x[r * kCols + kk]) * w[kk];
        // Half an 8-bit step of the activation block (at most 256 wide) holding kk.
        float amax = 0;
        for (int j = kk / 256 * 256; j < kk / 256 * 256 + 256; ++j) {
          amax = std::max(amax, std::fabs(x[r * kCols + j]));
        }
        bound += std::fabs(w[kk]) * amax / 127 / 2;
      }
      EXPECT_NEAR(out[r * 64 + c], exact, bound) << "row " << r << " column " << c;
    }
  }
}

TEST(LinearWeight, OnlineQuantizationChoosesByWidth) {
  std::mt19937 rng(3);
  const OwnedView wide = float_view(8, 256, rng);
  const OwnedView narrow = float_view(8, 96, rng);  // fills Q8_0/Q5_0 blocks, not Q4_K's
  const OwnedView odd = float_view(8, 100, rng);    // fills no block: stays float
  const WeightFormat q4k{QuantType::kQ4_K};
  EXPECT_EQ(LinearWeight::from_views({&wide.view}, q4k).format_names(),
            std::vector<std::string>{"Q4_K"});
  EXPECT_EQ(LinearWeight::from_views({&narrow.view}, q4k).format_names(),
            std::vector<std::string>{"Q5_0"});
  EXPECT_EQ(LinearWeight::from_views({&odd.view}, q4k).format_names(),
            std::vector<std::string>{"F32"});
  EXPECT_EQ(LinearWeight::from_views({&wide.view}).format_names(), std::vector<std::string>{"F32"});
  EXPECT_EQ(LinearWeight::from_views({&wide.view}, q4k).weight_bytes(),
            kernels::quant_row_bytes(QuantType::kQ4_K, 256) * 8);
}

TEST(LinearWeight, FloatAndQuantizedPartsMixedAreWidenedToFloat) {
  std::mt19937 rng(5);
  constexpr int kCols = 64;
  const OwnedView f = float_view(16, kCols, rng);
  const OwnedView q = quantized_view(QuantType::kQ8_0, 16, kCols, rng);
  const LinearWeight stacked = LinearWeight::from_views({&f.view, &q.view});
  EXPECT_EQ(stacked.format_names(), std::vector<std::string>{"F32"});
  const std::vector<float> x = random_rows(2, kCols, rng);
  std::vector<float> out(2 * 32);
  stacked.forward(x.data(), out.data(), 2, nullptr, kernels::Isa::kPortable);
  std::vector<float> w = to_f32(f.view);
  const std::vector<float> wq = to_f32(q.view);
  w.insert(w.end(), wq.begin(), wq.end());
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 32; ++c) {
      float acc = 0;  // the packed kernels' chain: fma over k from 0
      for (int kk = 0; kk < kCols; ++kk) acc = std::fma(x[r * kCols + kk], w[c * kCols + kk], acc);
      EXPECT_EQ(out[r * 32 + c], acc);
    }
  }
}

TEST(EmbeddingTable, QuantizedRowsDequantizeAsTheLoaderDoes) {
  std::mt19937 rng(9);
  const OwnedView table = quantized_view(QuantType::kQ6_K, 5, 256, rng);
  const EmbeddingTable embedding = EmbeddingTable::from_view(table.view);
  const std::vector<float> all = to_f32(table.view);
  std::vector<float> row(256);
  for (int id = 0; id < 5; ++id) {
    embedding.row(id, row.data());
    for (int i = 0; i < 256; ++i) ASSERT_EQ(row[i], all[id * 256 + i]) << id << " " << i;
  }
}

}  // namespace
}  // namespace pagedserve::model
