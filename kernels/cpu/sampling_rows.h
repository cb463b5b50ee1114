// Row kernels of the CPU sampler (model/sampler.cpp): one pass each over a logits row of the
// whole vocabulary, vectorised, so that sampling costs a few passes over the row and never a
// sort of it. Like every kernel here they never allocate and never throw.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace pagedserve::kernels {

struct RowRange {
  float min = 0.0f;
  float max = 0.0f;
};
// The smallest and largest of x[0, n) (n >= 1); NaNs are skipped.
RowRange row_min_max(const float* x, int64_t n, Isa isa = best_isa());

// The index of the first largest element of x[0, n) (n >= 1), as std::max_element finds it.
int64_t row_argmax(const float* x, int64_t n, Isa isa = best_isa());

// A row's chunk maxima, gathered by the matmul that wrote the row while each chunk was still in
// cache (matmul_packed's `chunk_max`, the LM head's): maxima[c] is the largest non-NaN element of
// x[c * width, min(n, (c + 1) * width)), -inf when there is none. A greedy row then reads one
// chunk of itself, not the whole row.
struct RowChunkMaxima {
  const float* maxima = nullptr;  // ceil(n / width) of them; null: not gathered
  int64_t width = 0;
  bool empty() const { return maxima == nullptr; }
};
// The chunk maxima of every row of a [rows, n] matrix, row after row; empty when not gathered.
struct ChunkMaxima {
  const float* maxima = nullptr;
  int64_t width = 0;
  int64_t per_row = 0;
  bool empty() const { return maxima == nullptr; }
  RowChunkMaxima row(int64_t r) const {
    return empty() ? RowChunkMaxima{} : RowChunkMaxima{maxima + r * per_row, width};
  }
};
// The largest non-NaN element of x[0, n) (n >= 1), -inf when there is none.
float chunk_max(const float* x, int64_t n, Isa isa = best_isa());
// The chunk maxima of one column tile of m rows, right after a matmul wrote it: maxima[r *
// stride] = chunk_max of out[r * ldo + first, + cols) (matmul_packed's and
// matmul_quantized_stacked's chunk_max).
void tile_chunk_maxima(const float* out, int64_t ldo, int m, int64_t first, int64_t cols,
                       float* maxima, int64_t stride, Isa isa = best_isa());
// row_argmax(x, n) from the row's chunk maxima, reading only the chunk that holds the maximum;
// -1 when no element is above -inf (row_argmax decides those rows).
int64_t argmax_from_chunk_maxima(const float* x, int64_t n, const RowChunkMaxima& row);

// sum over i of exp(double(x[i]) - shift), in double (-inf elements add 0).
double row_sum_exp(const float* x, int64_t n, double shift, Isa isa = best_isa());
// The same sum from float exps of the float gaps x[i] - shift (shift finite, >= every x[i]),
// summed in double: each term within single_precision_exp_error(shift - x[i]) of the exact
// one (gaps past 87 count as e^-87, < 2e-38 each; NaNs as well), so the sum is within
// ~(max gap + 3) * 2^-24 relative of row_sum_exp's. About twice as fast (16 float lanes, not
// 8 double ones): the log-sum-exp of a logprob, which is reported as a float, needs no more.
double row_sum_exp_f32(const float* x, int64_t n, float shift, Isa isa = best_isa());

// The sampler's histogram of one row at a temperature. Element i has the scaled logit
// s = logits[i] / temperature (float division, as the sampler computes it) and lands in bucket
// min(num_buckets - 1, floor((max_scaled - s) * buckets_per_unit)): buckets go down the
// distribution, a higher logit never in a later bucket than a lower one. Each bucket gets its
// element count and its mass, the sum of exp(double(s) - double(max_scaled)).
struct ExpHistogramParams {
  const float* logits = nullptr;  // [n]
  int64_t n = 0;
  float temperature = 1.0f;         // > 0
  float max_scaled = 0.0f;          // max(logits) / temperature, finite
  float buckets_per_unit = 1.0f;    // > 0
  int num_buckets = 256;            // 1..256
  uint8_t* bucket = nullptr;        // [n] out: each element's bucket
  int32_t* bucket_count = nullptr;  // [num_buckets] out; may be null when masses are wanted
  double* bucket_mass = nullptr;    // [num_buckets] out; null skips the exps (counts only)
  // Masses from a float exp of the float gap (AVX-512 only; the portable path is always
  // exact), each term within single_precision_exp_error of the exact one. Twice as fast; the
  // sampler checks its decisions against that bound and redoes an undecided row in double.
  bool single_precision = false;
};
// Relative error bound of a single_precision term whose gap below the max is at most max_gap:
// the float gap's rounding (max_gap * 2^-24, as e^(x + d) = e^x (1 + d)) plus 3 * 2^-24 for
// exp_avx512 itself (measured: at most 1.32 * 2^-24 over 32M inputs in [-87, 0]). Gaps past 87
// clamp to e^-87: such terms err by < 1e-37 each. SamplingRows tests hold masses to it.
inline double single_precision_exp_error(double max_gap) { return (max_gap + 3.0) * 0x1.0p-24; }
// Fills the histogram and returns the total mass (0 without bucket_mass). The AVX-512 path's
// double exp is within ~2 ulp of std::exp, which the portable path uses.
double exp_histogram(const ExpHistogramParams& params, Isa isa = best_isa());

// Writes the indices i (ascending) whose bucket[i] lies in [lo, hi] to out and returns how
// many; out must have room for every match.
int64_t collect_buckets(const uint8_t* bucket, int64_t n, int lo, int hi, int32_t* out,
                        Isa isa = best_isa());

// A grammar's token mask applied to one row: x[i] = -inf for every i < n whose bit
// (bitmask[i / 32] >> (i % 32)) & 1 is clear, and for every i >= allowed_ids (ids past the
// grammar's vocabulary, which it never allows); other elements are untouched. bitmask has
// (min(n, allowed_ids) + 31) / 32 words. The CPU twin of kernels/cuda's apply_token_bitmask.
void apply_token_bitmask(float* x, int64_t n, const uint32_t* bitmask, int64_t allowed_ids);

}  // namespace pagedserve::kernels
