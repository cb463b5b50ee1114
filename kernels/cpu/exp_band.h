// Row kernels of the sampler's band draw (model/band_draw.h): a temperature draw with no
// top-k, top-p or min-p needs only the total mass, the mass before a narrow band of the sorted
// order and the band's own elements. These kernels give those in one vectorised pass with no
// per-element scatter (the bucketed histogram's cost), plus the passes that choose the band.
// Like every kernel here they never allocate and never throw.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/sampling_rows.h"

namespace pagedserve::kernels {

struct BlockedRange {
  RowRange range;        // of the non-NaN elements
  bool has_nan = false;  // any NaN element
};
// The row's range, and block_max[b] = the largest non-NaN element of x[b * block, (b + 1) *
// block) (-inf for an all-NaN block), for every block b < ceil(n / block). n >= 1; block a
// positive multiple of 16.
BlockedRange row_block_max(const float* x, int64_t n, int64_t block, float* block_max,
                           Isa isa = best_isa());

// out[i] = the float exp of the float gap x[i] / temperature - max_scaled (the division
// skipped at temperature 1), as exp_histogram's single-precision masses compute it: within
// single_precision_exp_error(gap) of the exact exp. x[i] / temperature <= max_scaled.
void scaled_exp_f32(const float* x, int64_t n, float temperature, float max_scaled, float* out,
                    Isa isa = best_isa());

// Element i has the scaled logit s = logits[i] / temperature and the gap g = max_scaled - s,
// both in float (the gap classifies; the mass is taken of s itself, kBandMassError): g is
// monotone in s, so g < above holds for a prefix of the sorted order and g >= below for a
// suffix. A band is what lies between. One pass serves one or two bands (a top-p draw's cut
// and its draw): each has the mass before it, and the elements of either are collected once.
inline constexpr int kMaxBands = 2;
struct ExpBandParams {
  const float* logits = nullptr;  // [n]
  int64_t n = 0;
  float temperature = 1.0f;  // > 0
  // max(logits) / temperature, finite, and no gap past 87 nats (the float exps are not clamped:
  // the band draw takes no row spread wider than 80).
  float max_scaled = 0.0f;
  int num_bands = 1;                     // 1 or kMaxBands
  std::array<float, kMaxBands> above{};  // g < above: before the band
  std::array<float, kMaxBands> below{};  // g >= below: after it (infinity: nothing after it)
  // The bands' ids (ascending), scaled logits and masses (the float exps, as doubles: the
  // masses the band walk sums); room for capacity + 16 entries each (whole vectors are
  // stored). More than capacity elements stop the pass (overflow: the sums and the bands are
  // then incomplete).
  int32_t* band_ids = nullptr;
  float* band_scaled = nullptr;
  double* band_mass = nullptr;
  int64_t capacity = 0;
  // The row the caller reads next (n floats), or null: a cache line of it is requested each
  // vector, so that row's first pass finds it in cache, not in memory. The sampler's rows are
  // written by the LM head's matmul, whose weights then stream through the caches: a row is
  // read cold, and this pass, bound by its exps, has memory bandwidth to spare.
  const float* prefetch = nullptr;
  // Sums of double exps instead, exp(double(s) - double(max_scaled)) as exp_histogram's exact
  // masses, and nothing collected (the band pointers may be null).
  bool exact = false;
};
// How far a float pass's mass of one element may be from the exact exp(double(s) -
// double(max_scaled)), relative, whatever its gap: the AVX-512 pass computes e^s' * 2^-k (s'
// the scaled logit shifted exactly, exp_avx512_times_pow2) and rescales by the common factor in
// double; the portable one rounds a double exp to float.
inline constexpr double kBandMassError = 3.01 * 0x1.0p-24;
struct ExpBandResult {
  double total = 0.0;  // every element's mass (float exps, or double ones if exact)
  // The relative error bound of total, of each mass_above and of each band mass against the
  // exact masses of the same elements: kBandMassError a term, plus the rounding of float block
  // sums where the pass adds vectors in float lanes before widening them (AVX-512, one band:
  // cheaper than widening every vector). 0 when exact.
  double mass_error = 0.0;
  std::array<double, kMaxBands> mass_above{};  // of the elements before each band
  int64_t band_count = 0;                      // collected (at most capacity)
  bool overflow = false;
};
ExpBandResult exp_band(const ExpBandParams& params, Isa isa = best_isa());

// One step of narrowing a band down to where a draw lands (model/band_walk.cpp). Of the n
// elements (scaled logit, mass, id), each with the float gap g = max_scaled - scaled[i] as
// exp_band computes it: those with g < from are summed into mass_before; those with
// from <= g < to are summed into mass_between and collected, in order, into out_* (room for
// n + 8 entries each: whole vectors are stored). from may be -inf and to +inf.
struct GapSplit {
  double mass_before = 0.0;
  double mass_between = 0.0;
  int64_t count = 0;  // collected
};
GapSplit split_by_gap(const float* scaled, const double* mass, const int32_t* ids, int64_t n,
                      float max_scaled, float from, float to, float* out_scaled, double* out_mass,
                      int32_t* out_ids, Isa isa = best_isa());

// out[i] = exp(double(scaled[i]) - shift), within ~2 ulp of std::exp (exp_histogram's exact
// masses): a band's elements, once the float masses could not decide a draw.
void shifted_exp_f64(const float* scaled, int64_t n, double shift, double* out,
                     Isa isa = best_isa());

}  // namespace pagedserve::kernels
