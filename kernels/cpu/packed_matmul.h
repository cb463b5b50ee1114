// Packed-weight matmul: the CPU executor's linear layers. Weights are packed once, at load,
// into the order the kernel reads them, and F16/BF16 weights stay 16-bit in memory (widened in
// registers), so batch-1 decode streams half the bytes.
//
// Batch invariance is the contract: every output element is the same sequential chain of fused
// multiply-adds over k, acc = fma(x[r, kk], w[c, kk], acc) for kk = 0..k-1 starting from 0,
// whatever m, the row's position in the batch, the thread split or the instruction set. So a
// sequence's logits never depend on what else is in its batch, and all ISA paths agree
// bit-for-bit (fma is exactly rounded). Speed comes from computing many such chains at once
// (a register tile of rows x 64 columns), not from splitting one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/isa.h"

namespace pagedserve::kernels {

class ThreadPool;

// ---- Packed weights ---------------------------------------------------------------------------
enum class WeightDtype { kF32, kF16, kBF16 };

size_t weight_dtype_size(WeightDtype dtype);

// A Hugging Face Linear weight w [n, k] (rows contiguous in k) in tiles of 64 rows: tile t
// holds rows 64t..64t+63, k-major, so element (64t + j, kk) sits at tile(t)[kk * 64 + j] and
// one k step of a tile is 64 consecutive values (one stream for the hardware prefetcher, four
// 16-float vectors). The last tile is padded with zero rows, so every kernel tile is full
// width. Move-only.
// Frees PackedWeight storage (kernels/cpu/huge_page_allocator.h) of the given size.
struct AlignedFree {
  size_t bytes = 0;
  void operator()(std::byte* p) const;
};

class PackedWeight {
 public:
  static constexpr int kTileRows = 64;

  PackedWeight() = default;
  // w: [n, k] row-major in `dtype` (F16/BF16 as raw 16-bit patterns, little-endian).
  static PackedWeight pack(const void* w, WeightDtype dtype, int n, int k);

  int rows() const { return n_; }  // n: output features
  int cols() const { return k_; }  // k: input features
  WeightDtype dtype() const { return dtype_; }
  int num_tiles() const { return num_tiles_; }
  // Bytes of the real [n, k] weight (what one pass over it must read), padding excluded.
  size_t weight_bytes() const { return static_cast<size_t>(n_) * k_ * weight_dtype_size(dtype_); }
  size_t tile_bytes() const {
    return static_cast<size_t>(k_) * kTileRows * weight_dtype_size(dtype_);
  }
  const std::byte* tile(int t) const { return data_ + static_cast<size_t>(t) * tile_bytes(); }

 private:
  // 64-byte aligned; for large weights 2 MiB aligned, freshly mapped and backed by huge pages
  // where the OS allows (decode streams them, and 4 KiB pages cost a TLB miss every 4 KiB).
  std::unique_ptr<std::byte, AlignedFree> storage_;
  const std::byte* data_ = nullptr;
  int n_ = 0;
  int k_ = 0;
  int num_tiles_ = 0;
  WeightDtype dtype_ = WeightDtype::kF32;
};

// out[m, n] = x[m, k] * w^T with the fma-chain contract above. x rows are k floats apart, out
// rows n floats apart. With a pool, the 64-column tiles are split across threads (each weight byte
// is still read once per call). m may be 0.
// chunk_max, when given: [m, num_tiles()], the largest non-NaN value (-inf if none) of each
// row's 64-column tiles, taken right after each tile is written, while it is in cache (an LM
// head's logits: a greedy row then reads one tile of itself; kernels/cpu/sampling_rows.h).
void matmul_packed(const float* x, const PackedWeight& w, float* out, int m,
                   ThreadPool* pool = nullptr, Isa isa = best_isa(), float* chunk_max = nullptr);

// ---- Per-ISA kernels (kernels/cpu/matmul_*.cpp), for matmul_packed ------------------------------
namespace detail {
// Computes the columns of tile `tile` (columns 64*tile .. 64*tile+63, clipped to n) for all m rows.
using MatmulTileFn = void (*)(const float* x, const PackedWeight& w, float* out, int m, int tile);
void matmul_tile_portable(const float* x, const PackedWeight& w, float* out, int m, int tile);
void matmul_tile_avx2(const float* x, const PackedWeight& w, float* out, int m, int tile);
void matmul_tile_avx512(const float* x, const PackedWeight& w, float* out, int m, int tile);
}  // namespace detail

}  // namespace pagedserve::kernels
