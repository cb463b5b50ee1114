// llama.cpp's block-quantized weight formats (GGUF / ggml-common.h layouts) and the CPU
// kernels that multiply by them without widening the weights in memory.
//
// A quantized row of k values is k / block_elements blocks, each a fixed number of bytes that
// holds a scale (and for some types a minimum) plus small integers. On a CPU, decode reads
// every weight byte once per step, so a Q4_K row (4.5 bits a weight) streams ~3.5x fewer bytes
// than the same row in F16.
//
// Numerics (the batch-invariance contract of packed_matmul.h, restated for integers): each
// activation row is quantized on its own to 8-bit blocks (Q8_0-style blocks of 32 for Q8_0,
// Q4_0, Q5_0, Q5_1; Q8_K-style blocks of 256 for the K types), the integer dot product of a
// weight block with an activation block is exact, and each output element accumulates its
// blocks' scaled sums in float in a fixed order over k. So a row's results depend only on that
// row: never on m, its place in the batch, the thread split or the instruction set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed_matmul.h"  // AlignedFree

namespace pagedserve::kernels {

class ThreadPool;

enum class QuantType : uint8_t { kQ8_0, kQ4_0, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K };

const char* quant_type_name(QuantType type);                       // "Q8_0", "Q4_K", ...
std::optional<QuantType> parse_quant_type(std::string_view name);  // case-insensitive
int quant_block_elements(QuantType type);                          // 32, or 256 for K types
size_t quant_block_bytes(QuantType type);                          // 34, 18, 22, 24, 144, 176, 210
// Bytes of a row of n values (n a multiple of quant_block_elements).
inline size_t quant_row_bytes(QuantType type, int64_t n) {
  return static_cast<size_t>(n / quant_block_elements(type)) * quant_block_bytes(type);
}

// Scalar reference conversions of one row in ggml's layout; n a multiple of the block size.
// dequantize_row gives exactly the values ggml's dequantize_row_* gives. quantize_row writes
// blocks ggml reads back (round-to-nearest per block; the K types choose sub-block scales and
// minima by a small search, so the error is within a few percent of llama.cpp's quantizer).
void dequantize_row(QuantType type, const void* src, float* dst, int64_t n);
void quantize_row(QuantType type, const float* src, void* dst, int64_t n);

// A [n, k] weight (n output features, k input features, k a multiple of the block size) kept
// quantized, repacked at load into the kernels' layout; the source (a mapped GGUF file) is not
// touched and need not outlive it. Move-only.
class QuantizedWeight {
 public:
  QuantizedWeight() = default;
  // w: n rows in ggml's layout of `type`, quant_row_bytes(type, k) bytes apart.
  static QuantizedWeight pack(const void* w, QuantType type, int n, int k);
  // Quantizes float32 rows [n, k] (online quantization of F32/F16/BF16 checkpoints).
  static QuantizedWeight quantize(const float* w, QuantType type, int n, int k);
  // The same from rows made on demand: row(r, out) writes row r's k floats to out. It is called
  // once per row, from several threads at once for a large weight, so a checkpoint's F16/BF16
  // rows are widened a row at a time instead of into a float copy of the whole matrix.
  using RowFn = std::function<void(int row, float* out)>;
  static QuantizedWeight quantize_rows(const RowFn& row, QuantType type, int n, int k);

  int rows() const { return n_; }
  int cols() const { return k_; }
  QuantType type() const { return type_; }
  // Bytes of the quantized [n, k] weight in ggml's layout (what one pass must read).
  size_t weight_bytes() const { return static_cast<size_t>(n_) * quant_row_bytes(type_, k_); }
  // Row `row` back in float32 ([k] values; for embedding lookups and tests).
  void dequantize_row_to(int row, float* out) const;

  // The kernels' layout (quant_matmul.cpp): opaque outside the kernels.
  const std::byte* data() const { return data_; }
  size_t storage_bytes() const { return storage_bytes_; }

 private:
  // An [n, k] weight of `type` with its tiles allocated, for pack_rows to fill.
  static QuantizedWeight with_storage(QuantType type, int n, int k);

  std::unique_ptr<std::byte, AlignedFree> storage_;
  const std::byte* data_ = nullptr;
  size_t storage_bytes_ = 0;
  int n_ = 0;
  int k_ = 0;
  QuantType type_ = QuantType::kQ8_0;
};

// out[r * ldo + c] = sum_kk x[r, kk] * w[c, kk] for r < m, c < n, with x's rows quantized as the
// header says. x: [m, k] float32, rows k apart; ldo >= n (so stacked projections of different
// types can write side by side into one output row). With a pool, columns are split across
// threads and each weight byte is read once per call. m may be 0.
void matmul_quantized(const float* x, const QuantizedWeight& w, float* out, int m, int ldo,
                      ThreadPool* pool = nullptr, Isa isa = best_isa());

// The weights ws[0..count) (all with cols() == k) stacked by rows into one [sum rows, k] product:
// ws[i]'s outputs go to columns first_i.. of each output row, first_i the rows of ws[0..i).
// The same bits as one matmul_quantized call per weight, but x is quantized once per block size
// and all the weights' tiles are split across the pool in one call, one sync point instead of
// one per weight (a GGUF's separate q, k, v and gate, up tensors).
// chunk_max, when given (one weight only): [m, ceil(n / kQuantChunkColumns)], the largest
// non-NaN value (-inf if none) of each out row's 16-column chunks, taken as each is written
// (a quantized LM head's, for greedy rows: kernels/cpu/sampling_rows.h).
inline constexpr int kQuantChunkColumns = 16;
void matmul_quantized_stacked(const float* x, std::span<const QuantizedWeight> ws, float* out,
                              int m, int ldo, ThreadPool* pool = nullptr, Isa isa = best_isa(),
                              float* chunk_max = nullptr);

}  // namespace pagedserve::kernels
