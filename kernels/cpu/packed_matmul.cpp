// PackedWeight packing, ISA detection and the dispatch of matmul_packed; the portable kernel
// (std::fma, so it computes exactly what the SIMD kernels compute).
#include "kernels/cpu/packed_matmul.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <new>

#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/sampling_rows.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {

size_t weight_dtype_size(WeightDtype dtype) { return dtype == WeightDtype::kF32 ? 4 : 2; }

// Packed weights: 64-byte aligned for the vector loads (large ones get 2 MiB alignment).
constexpr size_t kPackedAlignment = 64;

void AlignedFree::operator()(std::byte* p) const { free_huge_aligned(p, bytes, kPackedAlignment); }

PackedWeight PackedWeight::pack(const void* w, WeightDtype dtype, int n, int k) {
  assert(n >= 0 && k >= 0 && (w != nullptr || static_cast<int64_t>(n) * k == 0));
  PackedWeight packed;
  packed.n_ = n;
  packed.k_ = k;
  packed.dtype_ = dtype;
  packed.num_tiles_ = (n + kTileRows - 1) / kTileRows;
  const size_t elem = weight_dtype_size(dtype);
  const size_t total = std::max<size_t>(64, packed.tile_bytes() * packed.num_tiles_);
  packed.storage_ = std::unique_ptr<std::byte, AlignedFree>(
      static_cast<std::byte*>(allocate_huge_aligned(total, kPackedAlignment)), AlignedFree{total});
  std::memset(packed.storage_.get(), 0, total);  // the first touch: maps huge pages
  packed.data_ = packed.storage_.get();
  const auto* src = static_cast<const std::byte*>(w);
  for (int row = 0; row < n; ++row) {
    std::byte* tile = packed.storage_.get() + (row / kTileRows) * packed.tile_bytes();
    const int j = row % kTileRows;
    const std::byte* src_row = src + static_cast<size_t>(row) * k * elem;
    for (int kk = 0; kk < k; ++kk) {
      std::memcpy(tile + (static_cast<size_t>(kk) * kTileRows + j) * elem, src_row + kk * elem,
                  elem);
    }
  }
  return packed;
}

namespace detail {

namespace {

float widen(const std::byte* base, size_t index, WeightDtype dtype) {
  if (dtype == WeightDtype::kF32) {
    float v;
    std::memcpy(&v, base + index * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, base + index * 2, 2);
  if (dtype == WeightDtype::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  // IEEE half: every value (subnormals included) is exact in float.
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  return (h & 0x8000) ? -magnitude : magnitude;
}

}  // namespace

void matmul_tile_portable(const float* x, const PackedWeight& w, float* out, int m, int tile) {
  constexpr int kRows = PackedWeight::kTileRows;
  const int n = w.rows();
  const int k = w.cols();
  const int col0 = tile * kRows;
  const int cols = std::min(kRows, n - col0);
  const std::byte* base = w.tile(tile);
  float acc[kRows];
  for (int r = 0; r < m; ++r) {
    std::fill(acc, acc + kRows, 0.0f);
    const float* x_row = x + static_cast<size_t>(r) * k;
    for (int kk = 0; kk < k; ++kk) {
      for (int j = 0; j < cols; ++j) {
        acc[j] = std::fma(x_row[kk], widen(base, static_cast<size_t>(kk) * kRows + j, w.dtype()),
                          acc[j]);
      }
    }
    std::copy(acc, acc + cols, out + static_cast<size_t>(r) * n + col0);
  }
}

}  // namespace detail

void matmul_packed(const float* x, const PackedWeight& w, float* out, int m, ThreadPool* pool,
                   Isa isa, float* chunk_max) {
  assert(m >= 0 && (m == 0 || (x != nullptr && out != nullptr)));
  assert(isa_supported(isa));
  if (m == 0 || w.rows() == 0) return;
  detail::MatmulTileFn tile_fn = detail::matmul_tile_portable;
  if (isa == Isa::kAvx512) tile_fn = detail::matmul_tile_avx512;
  if (isa == Isa::kAvx2) tile_fn = detail::matmul_tile_avx2;
  // Tiles are independent column ranges: any split across threads leaves every chain intact.
  // Each thread takes a contiguous run of tiles, which are stored one after another, so a
  // decode step's weights reach each core as one sequential stream.
  const int n = w.rows();
  parallel_for_contiguous(pool, w.num_tiles(), 2.0 * m * n * w.cols(), [&](int64_t tile) {
    tile_fn(x, w, out, m, static_cast<int>(tile));
    if (chunk_max == nullptr) return;
    const int64_t first = tile * PackedWeight::kTileRows;
    tile_chunk_maxima(out, n, m, first, std::min<int64_t>(PackedWeight::kTileRows, n - first),
                      chunk_max + tile, w.num_tiles(), isa);
  });
}

}  // namespace pagedserve::kernels
