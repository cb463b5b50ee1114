// matmul_packed's AVX-512 kernel: a register tile of up to 6 rows x 64 columns (24 zmm
// accumulators), one k step at a time: 4 weight vectors (widened from F16/BF16 in registers
// when the weight is 16-bit), 6 broadcasts, 24 FMAs. Each accumulator lane is one output's
// fma chain over k, so the result never depends on how rows are grouped into tiles.
//
// Only the functions marked kTarget use AVX-512; the file is built with the project's baseline
// flags (nothing here is an inline function or template another file could pick up), and
// matmul_packed calls it only when isa_supported(Isa::kAvx512).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/packed_matmul.h"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

namespace pagedserve::kernels::detail {
namespace {

constexpr int kRowsPerTile = 6;
constexpr int kVectors = PackedWeight::kTileRows / 16;  // 4 zmm per tile row
// The zero-masked forms with every lane set are the same instructions as the plain ones, but
// GCC 12's plain intrinsics start from _mm512_undefined_*, which -Wmaybe-uninitialized flags.
constexpr __mmask16 kAllLanes = 0xffff;

template <WeightDtype D>
PS_TARGET_AVX512 inline __m512 load_weights(const std::byte* p) {
  if constexpr (D == WeightDtype::kF32) {
    return _mm512_load_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (D == WeightDtype::kF16) {
    return _mm512_maskz_cvtph_ps(kAllLanes, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  } else {  // BF16: the upper half of a float
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(
        kAllLanes, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAllLanes, wide, 16));
  }
}

// How far ahead of the loads the first pass over a tile prefetches its weights. The hardware
// prefetchers alone left F16 decode at ~55 GB/s of ~79; 8 KiB ahead (two 4 KiB pages, which the
// hardware stream does not cross on its own) measured best of 1-64 KiB, +8% on F16 on top of
// the contiguous split, +2% on F32. Past the end of a tile it runs into the next tile in
// memory, which with ThreadPool::parallel_for_contiguous is usually this thread's next one.
constexpr uintptr_t kPrefetchAheadBytes = 8192;

// out[r, 0:cols] for R rows of x against one 64-row weight tile. kPrefetch: this pass streams
// the tile from memory (the first row group; later groups find it in L2).
template <int R, WeightDtype D, bool kPrefetch>
PS_TARGET_AVX512 void tile_rows(const float* x, long ldx, const std::byte* tile, int k, float* out,
                                long ldo, int cols) {
  constexpr long kStepBytes = PackedWeight::kTileRows * (D == WeightDtype::kF32 ? 4 : 2);
  constexpr long kVectorBytes = kStepBytes / kVectors;
  __m512 acc[R][kVectors];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const std::byte* w = tile;
  for (int kk = 0; kk < k; ++kk, w += kStepBytes) {
    __m512 wv[kVectors];
    if constexpr (kPrefetch) {
      // One prefetch per 64-byte line of this k step, kPrefetchAheadBytes on. The address is
      // formed as an integer: it may lie past the weight's allocation, which a prefetch
      // ignores but pointer arithmetic may not do.
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(w) + kPrefetchAheadBytes;
#pragma GCC unroll 4
      for (long b = 0; b < kStepBytes; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
      }
    }
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) wv[v] = load_weights<D>(w + v * kVectorBytes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * ldx + kk]);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_fmadd_ps(xr, wv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* o = out + r * ldo;
    if (cols == PackedWeight::kTileRows) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(o + 16 * v, acc[r][v]);
    } else {
      for (int v = 0; v < kVectors; ++v) {
        const int left = cols - 16 * v;
        if (left <= 0) break;
        const __mmask16 mask = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
        _mm512_mask_storeu_ps(o + 16 * v, mask, acc[r][v]);
      }
    }
  }
}

template <WeightDtype D>
PS_TARGET_AVX512 void tile_all_rows(const float* x, const PackedWeight& w, float* out, int m,
                                    int tile) {
  const int n = w.rows();
  const int k = w.cols();
  const int col0 = tile * PackedWeight::kTileRows;
  const int cols = n - col0 < PackedWeight::kTileRows ? n - col0 : PackedWeight::kTileRows;
  const std::byte* t = w.tile(tile);
  int r = 0;
  if (m >= kRowsPerTile) {
    tile_rows<kRowsPerTile, D, true>(x, k, t, k, out + col0, n, cols);
    r = kRowsPerTile;
  }
  for (; r + kRowsPerTile <= m; r += kRowsPerTile) {
    tile_rows<kRowsPerTile, D, false>(x + static_cast<long>(r) * k, k, t, k,
                                      out + static_cast<long>(r) * n + col0, n, cols);
  }
  const float* xr = x + static_cast<long>(r) * k;
  float* o = out + static_cast<long>(r) * n + col0;
  // The remaining rows; they are the first pass over the tile only when m < kRowsPerTile
  // (decode of up to 5 sequences), then they prefetch.
  const bool first_pass = r == 0;
  switch (m - r) {
    case 5:
      first_pass ? tile_rows<5, D, true>(xr, k, t, k, o, n, cols)
                 : tile_rows<5, D, false>(xr, k, t, k, o, n, cols);
      break;
    case 4:
      first_pass ? tile_rows<4, D, true>(xr, k, t, k, o, n, cols)
                 : tile_rows<4, D, false>(xr, k, t, k, o, n, cols);
      break;
    case 3:
      first_pass ? tile_rows<3, D, true>(xr, k, t, k, o, n, cols)
                 : tile_rows<3, D, false>(xr, k, t, k, o, n, cols);
      break;
    case 2:
      first_pass ? tile_rows<2, D, true>(xr, k, t, k, o, n, cols)
                 : tile_rows<2, D, false>(xr, k, t, k, o, n, cols);
      break;
    case 1:
      first_pass ? tile_rows<1, D, true>(xr, k, t, k, o, n, cols)
                 : tile_rows<1, D, false>(xr, k, t, k, o, n, cols);
      break;
    default:
      break;
  }
}

}  // namespace

void matmul_tile_avx512(const float* x, const PackedWeight& w, float* out, int m, int tile) {
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
