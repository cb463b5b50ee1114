// matmul_nt: out = x * w^T for Hugging Face Linear weights ([n, k], rows contiguous in k).
//
// Both operands are contiguous along k, so every output is a dot product of two k-rows. A
// register tile of R x C outputs is computed at once (each loaded x value feeds C products,
// each w value R), and every dot product is split across L independent accumulators ("lanes"):
// GCC turns the fixed-size lane loop into SIMD registers at -O3 without -ffast-math (lanes are
// only summed once, at the end), and the independent chains hide the add latency.
//
// Cache blocking: k is cut into kBlockK slices and n into kBlockN rows of w. For batches, each
// w block (kBlockN x kBlockK, 64 KiB) is first copied into a stack buffer with a compile-time
// row stride, then every row tile of x sweeps over it while it sits in L1/L2. The fixed stride
// matters: with run-time strides GCC spills the accumulators (measured ~30% slower). Decode
// (m < kPackMinRows) reads w in place, since each w value is used only m times and a copy
// would double the memory traffic of a memory-bound product.
#include <algorithm>
#include <cassert>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

// Tile shapes were picked by measurement (GCC 12, baseline x86-64 SSE2, so 4-float vectors).
constexpr int kBatchRows = 2;   // x rows per batch tile
constexpr int kBatchCols = 8;   // w rows per batch tile
constexpr int kBatchLanes = 4;  // 2 x 8 x 4 = 16 accumulator floats per x row pair
constexpr int kRowCols = 8;     // w rows per single-row tile (decode and odd last row)
constexpr int kRowLanes = 8;
constexpr int kBlockK = 256;     // k slice; a multiple of both lane counts
constexpr int kBlockN = 64;      // rows of w per cache block; a multiple of both column counts
constexpr int kPackMinRows = 4;  // below this, copying w costs more than it saves

static_assert(kBlockK % kBatchLanes == 0 && kBlockK % kRowLanes == 0);
static_assert(kBlockN % kBatchCols == 0 && kBlockN % kRowCols == 0);

// out[r, c] += dot(x[r, 0:k_len], w[c, 0:k_len]) for an R x C tile; x and out have row
// strides ldx and ldo; w has row stride kLdw when that is positive (a packed block), else ldw.
// noinline keeps each tile a small self-contained loop nest, which GCC vectorises best.
template <int R, int C, int L, int kLdw>
[[gnu::noinline]] void dot_tile(const float* x, long ldx, const float* w, long ldw, float* out,
                                long ldo, int k_len) {
  const long w_stride = kLdw > 0 ? kLdw : ldw;
  float acc[R][C][L] = {};
  const int k_vec = k_len - k_len % L;
  for (int kk = 0; kk < k_vec; kk += L) {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        for (int l = 0; l < L; ++l) {
          acc[r][c][l] += x[r * ldx + kk + l] * w[c * w_stride + kk + l];
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = 0.0f;
      for (int l = 0; l < L; ++l) sum += acc[r][c][l];
      for (int kk = k_vec; kk < k_len; ++kk) sum += x[r * ldx + kk] * w[c * w_stride + kk];
      out[r * ldo + c] += sum;
    }
  }
}

// R rows of x against the w rows [0, cols) of one block: full C-wide tiles, then single rows.
template <int R, int C, int L, int kLdw>
void tile_row(const float* x, long ldx, const float* w, long ldw, float* out, long ldo, int cols,
              int k_len) {
  int j = 0;
  for (; j + C <= cols; j += C) {
    dot_tile<R, C, L, kLdw>(x, ldx, w + j * ldw, ldw, out + j, ldo, k_len);
  }
  for (; j < cols; ++j) dot_tile<R, 1, L, kLdw>(x, ldx, w + j * ldw, ldw, out + j, ldo, k_len);
}

// Decode: every row reads w in place. Computes the columns [n_begin, n_end) of out.
void matmul_unpacked(const float* x, const float* w, float* out, int m, int n, int k, int n_begin,
                     int n_end) {
  for (int k0 = 0; k0 < k; k0 += kBlockK) {
    const int k_len = std::min(kBlockK, k - k0);
    for (int n0 = n_begin; n0 < n_end; n0 += kBlockN) {
      const int cols = std::min(kBlockN, n_end - n0);
      for (int i = 0; i < m; ++i) {
        tile_row<1, kRowCols, kRowLanes, 0>(x + static_cast<long>(i) * k + k0, k,
                                            w + static_cast<long>(n0) * k + k0, k,
                                            out + static_cast<long>(i) * n + n0, n, cols, k_len);
      }
    }
  }
}

// Batches: each w block is packed once, then reused by every row tile of x. Computes the
// columns [n_begin, n_end) of out.
void matmul_packed(const float* x, const float* w, float* out, int m, int n, int k, int n_begin,
                   int n_end) {
  float packed[kBlockN * kBlockK];
  const int m_pairs = m - m % kBatchRows;
  for (int k0 = 0; k0 < k; k0 += kBlockK) {
    const int k_len = std::min(kBlockK, k - k0);
    for (int n0 = n_begin; n0 < n_end; n0 += kBlockN) {
      const int cols = std::min(kBlockN, n_end - n0);
      for (int j = 0; j < cols; ++j) {
        const float* src = w + static_cast<long>(n0 + j) * k + k0;
        std::copy(src, src + k_len, packed + j * kBlockK);
      }
      for (int i = 0; i < m; i += kBatchRows) {
        const float* x_rows = x + static_cast<long>(i) * k + k0;
        float* out_rows = out + static_cast<long>(i) * n + n0;
        if (i < m_pairs) {
          tile_row<kBatchRows, kBatchCols, kBatchLanes, kBlockK>(x_rows, k, packed, kBlockK,
                                                                 out_rows, n, cols, k_len);
        } else {
          tile_row<1, kRowCols, kRowLanes, kBlockK>(x_rows, k, packed, kBlockK, out_rows, n, cols,
                                                    k_len);
        }
      }
    }
  }
}

}  // namespace

void matmul_nt(const float* x, const float* w, float* out, int m, int n, int k, ThreadPool* pool) {
  assert(x != nullptr && w != nullptr && out != nullptr);
  assert(m >= 0 && n >= 0 && k >= 0);
  // Tiles accumulate, so that every k slice is handled alike (and k == 0 yields zeros).
  std::fill(out, out + static_cast<long>(m) * n, 0.0f);
  // Tasks are whole cache blocks of w rows, so a split never changes the tiling (or the
  // floating-point result) and every thread streams its own part of w.
  const int64_t num_tasks = (n + kBlockN - 1) / kBlockN;
  parallel_for(pool, num_tasks, 2.0 * m * n * k, [&](int64_t task) {
    const int n_begin = static_cast<int>(task) * kBlockN;
    const int n_end = std::min(n, n_begin + kBlockN);
    if (m < kPackMinRows) {
      matmul_unpacked(x, w, out, m, n, k, n_begin, n_end);
    } else {
      matmul_packed(x, w, out, m, n, k, n_begin, n_end);
    }
  });
}

}  // namespace pagedserve::kernels
