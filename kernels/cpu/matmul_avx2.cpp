// matmul_packed's AVX2 kernel: register tiles of up to 3 rows x 32 columns (12 ymm
// accumulators; AVX2 has 16 registers), two such half-tiles per 64-row weight tile. Same fma
// chains as every other path; see packed_matmul.h. Only the kTarget functions use AVX2/FMA/F16C.
#include <immintrin.h>

#include "kernels/cpu/packed_matmul.h"

#define PS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace pagedserve::kernels::detail {
namespace {

constexpr int kRowsPerTile = 3;
constexpr int kVectors = 4;  // ymm per half tile: 32 columns

template <WeightDtype D>
PS_TARGET_AVX2 inline __m256 load_weights(const std::byte* p) {
  if constexpr (D == WeightDtype::kF32) {
    return _mm256_load_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (D == WeightDtype::kF16) {
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

// out[r, 0:cols] for R rows against 32 columns (half `half` of a weight tile).
template <int R, WeightDtype D>
PS_TARGET_AVX2 void half_tile_rows(const float* x, long ldx, const std::byte* tile, int half, int k,
                                   float* out, long ldo, int cols) {
  constexpr long kElem = D == WeightDtype::kF32 ? 4 : 2;
  constexpr long kStepBytes = PackedWeight::kTileRows * kElem;
  __m256 acc[R][kVectors];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  const std::byte* w = tile + half * 32 * kElem;
  for (int kk = 0; kk < k; ++kk, w += kStepBytes) {
    __m256 xr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) xr[r] = _mm256_set1_ps(x[r * ldx + kk]);
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      const __m256 wv = load_weights<D>(w + v * 8 * kElem);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][v] = _mm256_fmadd_ps(xr[r], wv, acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* o = out + r * ldo;
    for (int v = 0; v < kVectors; ++v) {
      const int left = cols - 8 * v;
      if (left <= 0) break;
      if (left >= 8) {
        _mm256_storeu_ps(o + 8 * v, acc[r][v]);
      } else {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, acc[r][v]);
        for (int i = 0; i < left; ++i) o[8 * v + i] = lanes[i];
      }
    }
  }
}

template <WeightDtype D>
PS_TARGET_AVX2 void tile_all_rows(const float* x, const PackedWeight& w, float* out, int m,
                                  int tile) {
  const int n = w.rows();
  const int k = w.cols();
  for (int half = 0; half < 2; ++half) {
    const int col0 = tile * PackedWeight::kTileRows + half * 32;
    if (col0 >= n) break;
    const int cols = n - col0 < 32 ? n - col0 : 32;
    const std::byte* t = w.tile(tile);
    int r = 0;
    for (; r + kRowsPerTile <= m; r += kRowsPerTile) {
      half_tile_rows<kRowsPerTile, D>(x + static_cast<long>(r) * k, k, t, half, k,
                                      out + static_cast<long>(r) * n + col0, n, cols);
    }
    const float* xr = x + static_cast<long>(r) * k;
    float* o = out + static_cast<long>(r) * n + col0;
    if (m - r == 2) half_tile_rows<2, D>(xr, k, t, half, k, o, n, cols);
    if (m - r == 1) half_tile_rows<1, D>(xr, k, t, half, k, o, n, cols);
  }
}

}  // namespace

void matmul_tile_avx2(const float* x, const PackedWeight& w, float* out, int m, int tile) {
  switch (w.dtype()) {
    case WeightDtype::kF32:
      return tile_all_rows<WeightDtype::kF32>(x, w, out, m, tile);
    case WeightDtype::kF16:
      return tile_all_rows<WeightDtype::kF16>(x, w, out, m, tile);
    case WeightDtype::kBF16:
      return tile_all_rows<WeightDtype::kBF16>(x, w, out, m, tile);
  }
}

}  // namespace pagedserve::kernels::detail
