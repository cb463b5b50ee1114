// The band draw's row kernels (exp_band.h): a portable loop and an AVX-512 one each. The
// AVX-512 band pass stores whole compressed vectors (unmasked) and moves on by their popcount:
// a masked store after a compress is slow on Zen 4.
#include "kernels/cpu/exp_band.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numbers>

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/exp_avx512_pd.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace pagedserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- portable ----

BlockedRange row_block_max_portable(const float* x, int64_t n, int64_t block, float* block_max) {
  BlockedRange out{{kInf, -kInf}, false};
  for (int64_t first = 0; first < n; first += block) {
    float top = -kInf;
    for (int64_t i = first; i < std::min(n, first + block); ++i) {
      if (std::isnan(x[i])) {
        out.has_nan = true;
        continue;
      }
      top = std::max(top, x[i]);
      out.range.min = std::min(out.range.min, x[i]);
    }
    block_max[first / block] = top;
    out.range.max = std::max(out.range.max, top);
  }
  return out;
}

// As exp_avx512: the exponent clamped to [-87, 88], a float exp.
float float_exp(float gap) { return std::exp(std::clamp(gap, -87.0f, 88.0f)); }

float scaled(float x, float temperature) { return temperature == 1.0f ? x : x / temperature; }

void scaled_exp_f32_portable(const float* x, int64_t n, float temperature, float max_scaled,
                             float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_exp(scaled(x[i], temperature) - max_scaled);
}

ExpBandResult exp_band_portable(const ExpBandParams& p) {
  ExpBandResult r;
  for (int64_t i = 0; i < p.n; ++i) {
    const float s = scaled(p.logits[i], p.temperature);
    const float gap = p.max_scaled - s;
    // Float masses: the double exp rounded to float, within kBandMassError whatever the gap
    // (a float exp of the float gap would carry the gap's rounding).
    const double exact = std::exp(static_cast<double>(s) - p.max_scaled);
    const double e = p.exact ? exact : static_cast<double>(static_cast<float>(exact));
    r.total += e;
    bool in_band = false;
    for (int b = 0; b < p.num_bands; ++b) {
      if (gap < p.above[b]) r.mass_above[b] += e;
      in_band = in_band || (gap >= p.above[b] && gap < p.below[b]);
    }
    if (p.exact || !in_band) continue;
    if (r.band_count == p.capacity) {
      r.overflow = true;
      return r;
    }
    p.band_ids[r.band_count] = static_cast<int32_t>(i);
    p.band_scaled[r.band_count] = s;
    p.band_mass[r.band_count++] = e;
  }
  r.mass_error = p.exact ? 0.0 : kBandMassError;
  return r;
}

GapSplit split_by_gap_portable(const float* scaled, const double* mass, const int32_t* ids,
                               int64_t n, float max_scaled, float from, float to, float* out_scaled,
                               double* out_mass, int32_t* out_ids) {
  GapSplit r;
  for (int64_t i = 0; i < n; ++i) {
    const float gap = max_scaled - scaled[i];
    if (gap < from) {
      r.mass_before += mass[i];
    } else if (gap < to) {
      r.mass_between += mass[i];
      out_scaled[r.count] = scaled[i];
      out_mass[r.count] = mass[i];
      out_ids[r.count++] = ids[i];
    }
  }
  return r;
}

// ---- AVX-512 ----

PS_TARGET_AVX512 BlockedRange row_block_max_avx512(const float* x, int64_t n, int64_t block,
                                                   float* block_max) {
  __m512 lo = _mm512_set1_ps(kInf);
  __m512 hi_row = _mm512_set1_ps(-kInf);
  __mmask16 nan = 0;
  for (int64_t first = 0; first < n; first += block) {
    __m512 hi = _mm512_set1_ps(-kInf);
    const int64_t end = std::min(n, first + block);
    for (int64_t i = first; i < end; i += 16) {
      const __mmask16 m = tail_mask16(end - i);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
      nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
      // min/max return the second operand when either is NaN: the running value survives.
      lo = _mm512_mask_min_ps(lo, m, v, lo);
      hi = _mm512_mask_max_ps(hi, m, v, hi);
    }
    block_max[first / block] = _mm512_reduce_max_ps(hi);
    hi_row = _mm512_max_ps(hi_row, hi);
  }
  return {{_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi_row)}, nan != 0};
}

PS_TARGET_AVX512 void scaled_exp_f32_avx512(const float* x, int64_t n, float temperature,
                                            float max_scaled, float* out) {
  const __m512 t = _mm512_set1_ps(temperature);
  const __m512 shift = _mm512_set1_ps(max_scaled);
  const bool unit = temperature == 1.0f;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 raw = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 s = unit ? raw : _mm512_div_ps(raw, t);
    _mm512_mask_storeu_ps(out + i, m, exp_avx512(_mm512_sub_ps(s, shift)));
  }
}

// The masks of one band: before it, and in it. g < above is -g > -above, and -g = s -
// max_scaled is the exp's argument (exactly: float subtraction rounds symmetrically). Two
// compares: a lane not at or past the band's start is before it.
struct BandMasks {
  __mmask16 before;
  __mmask16 in;
};
PS_TARGET_AVX512 BandMasks band_masks(__mmask16 m, __m512 minus_gap, __m512 minus_above,
                                      __m512 minus_below) {
  const __mmask16 from_start = _mm512_mask_cmp_ps_mask(m, minus_gap, minus_above, _CMP_LE_OQ);
  return {_kandn_mask16(from_start, m),
          _mm512_mask_cmp_ps_mask(from_start, minus_gap, minus_below, _CMP_GT_OQ)};
}

PS_TARGET_AVX512 void masked_accumulate(__mmask16 mask, __m512d e_lo, __m512d e_hi, __m512d* lo,
                                        __m512d* hi) {
  *lo = _mm512_mask_add_pd(*lo, static_cast<__mmask8>(mask), *lo, e_lo);
  *hi = _mm512_mask_add_pd(*hi, static_cast<__mmask8>(mask >> 8), *hi, e_hi);
}

// Four vectors' float exps summed lane by lane in float, as a tree of depth 2 (within
// kBlockSumError of their exact sum, relative: the terms are positive), then widened to the
// double sums once: widening every vector cost more than its exp.
constexpr double kBlockSumError = 2.01 * 0x1.0p-24;
PS_TARGET_AVX512 void add_four_widened(const __m512 (&v)[4], __m512d* lo, __m512d* hi) {
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(v[0], v[1]), _mm512_add_ps(v[2], v[3]));
  __m512d sum_lo, sum_hi;
  widen_to_pd(sum, &sum_lo, &sum_hi);
  *lo = _mm512_add_pd(*lo, sum_lo);
  *hi = _mm512_add_pd(*hi, sum_hi);
}

// The float exps' scale (exp_avx512_times_pow2): each element's float mass is e^(s - shift) *
// 2^-k, its exact mass e^(s - max_scaled) times `factor`. s - shift is exact and within
// [-128, 128], where the exp's range reduction is exact: shift is 0 when every s of the row
// lies there (max_scaled in [-41, 128], no gap past 87), and otherwise (every |s| > 41, so
// their ulps are at least 2^-18) an integer within 44.5 of every s, so s - shift is a multiple
// of 2^-18 below 2^24 of them.
struct ExpScale {
  float shift = 0.0f;
  float k = 0.0f;       // round((max_scaled - shift) / ln2)
  double factor = 1.0;  // e^(max_scaled - shift - k ln2)
};
ExpScale exp_scale(float max_scaled) {
  ExpScale sc;
  if (!(max_scaled >= -41.0f && max_scaled <= 128.0f)) {
    sc.shift = std::nearbyint(max_scaled - 44.0f);
  }
  const double top = static_cast<double>(max_scaled) - sc.shift;
  sc.k = static_cast<float>(std::nearbyint(top / std::numbers::ln2));
  sc.factor = std::exp(top - sc.k * std::numbers::ln2);
  return sc;
}

// The band's masses again, from its scaled logits: the same operations on the same values, so
// the same float exps, for a band of a few percent of the row instead of a third compressed
// store on every vector of it; times `inverse` (1 / the scale's factor) in double.
PS_TARGET_AVX512 void band_masses_avx512(const float* band_scaled, int64_t count,
                                         const ExpScale& scale, double inverse, double* out) {
  const __m512 shift = _mm512_set1_ps(scale.shift);
  const __m512 minus_k = _mm512_set1_ps(-scale.k);
  const __m512d inverse_v = _mm512_set1_pd(inverse);
  for (int64_t j = 0; j < count; j += 16) {
    const __mmask16 m = tail_mask16(count - j);
    const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, band_scaled + j), shift);
    __m512d lo, hi;
    widen_to_pd(exp_avx512_times_pow2(x, minus_k), &lo, &hi);
    _mm512_mask_storeu_pd(out + j, static_cast<__mmask8>(m), _mm512_mul_pd(lo, inverse_v));
    _mm512_mask_storeu_pd(out + j + 8, static_cast<__mmask8>(m >> 8), _mm512_mul_pd(hi, inverse_v));
  }
}

// kUnit: temperature 1 (the OpenAI default), whose division is skipped: x / 1 is x, bit for bit.
// One band (a draw with no cut) sums four vectors at a time (add_four_widened): -4 to -11% on
// a 128k T=1 draw. Two bands (a top-p or min-p cut) widen every vector: the block sums'
// rounding would widen the tolerance of their cut's decision.
template <int kBands, bool kUnit>
PS_TARGET_AVX512 ExpBandResult exp_band_avx512(const ExpBandParams& p) {
  constexpr bool kBlockSums = kBands == 1;
  const __m512 t = _mm512_set1_ps(p.temperature);
  const __m512 max_scaled = _mm512_set1_ps(p.max_scaled);
  const ExpScale scale = exp_scale(p.max_scaled);
  const __m512 shift = _mm512_set1_ps(scale.shift);
  const __m512 minus_k = _mm512_set1_ps(-scale.k);
  __m512 minus_above[kBands], minus_below[kBands];
  __m512d above_lo[kBands], above_hi[kBands];
  for (int b = 0; b < kBands; ++b) {
    minus_above[b] = _mm512_set1_ps(-p.above[b]);
    minus_below[b] = _mm512_set1_ps(-p.below[b]);
    above_lo[b] = above_hi[b] = _mm512_setzero_pd();
  }
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  __m512d total_lo = _mm512_setzero_pd(), total_hi = _mm512_setzero_pd();
  // Locals, not p's fields: the stores through the band pointers could alias p otherwise, and
  // every field would be read again each vector.
  const float* const logits = p.logits;
  const int64_t n = p.n;
  const float* const prefetch = p.prefetch;
  int32_t* const band_ids = p.band_ids;
  float* const band_scaled = p.band_scaled;
  double* const band_mass = p.band_mass;
  const int64_t capacity = p.capacity;
  int64_t count = 0;
  ExpBandResult r;
  for (int64_t first = 0; first < n && !r.overflow; first += 64) {
    __m512 e[4], before_e[kBands][4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v, index = _mm512_add_epi32(index, step)) {
      const int64_t i = first + 16 * v;
      // Past the row's end (its last four vectors): no lanes, every sum gets zeros, and no
      // pointer past the row is formed.
      const bool inside = i < n;
      const __mmask16 m = inside ? tail_mask16(n - i) : 0;
      const __m512 raw = _mm512_maskz_loadu_ps(m, logits + (inside ? i : 0));
      if (prefetch != nullptr && inside) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + i), _MM_HINT_T0);
      }
      const __m512 s = kUnit ? raw : _mm512_div_ps(raw, t);
      // The gap classifies the element; the exp is taken of s itself (exp_scale).
      const __m512 minus_gap = _mm512_sub_ps(s, max_scaled);
      e[v] = _mm512_maskz_mov_ps(m, exp_avx512_times_pow2(_mm512_sub_ps(s, shift), minus_k));
      __m512d e_lo, e_hi;
      if constexpr (!kBlockSums) {
        widen_to_pd(e[v], &e_lo, &e_hi);
        total_lo = _mm512_add_pd(total_lo, e_lo);
        total_hi = _mm512_add_pd(total_hi, e_hi);
      }
      __mmask16 in_band = 0;
      for (int b = 0; b < kBands; ++b) {
        const BandMasks masks = band_masks(m, minus_gap, minus_above[b], minus_below[b]);
        if constexpr (kBlockSums) {
          before_e[b][v] = _mm512_maskz_mov_ps(masks.before, e[v]);
        } else {
          masked_accumulate(masks.before, e_lo, e_hi, &above_lo[b], &above_hi[b]);
        }
        in_band |= masks.in;
      }
      // Stored whatever the mask (a flat row's band hits about half the vectors: a branch on it
      // mispredicts); a store past the band is overwritten by the next one.
      const int hits = __builtin_popcount(in_band);
      if (count + hits > capacity) {
        r.overflow = true;  // the sums are incomplete: the caller discards them
        break;
      }
      _mm512_storeu_si512(band_ids + count, _mm512_maskz_compress_epi32(in_band, index));
      _mm512_storeu_ps(band_scaled + count, _mm512_maskz_compress_ps(in_band, s));
      count += hits;
    }
    if (r.overflow) break;
    if constexpr (kBlockSums) {
      add_four_widened(e, &total_lo, &total_hi);
      for (int b = 0; b < kBands; ++b) add_four_widened(before_e[b], &above_lo[b], &above_hi[b]);
    }
  }
  r.band_count = count;
  // Every mass on the exact scale: the float exps over the common factor, in double (a
  // rounding of 2^-53, inside kBandMassError's margin).
  const double inverse = 1.0 / scale.factor;
  band_masses_avx512(band_scaled, count, scale, inverse, band_mass);
  r.total = _mm512_reduce_add_pd(_mm512_add_pd(total_lo, total_hi)) * inverse;
  for (int b = 0; b < kBands; ++b) {
    r.mass_above[b] = _mm512_reduce_add_pd(_mm512_add_pd(above_lo[b], above_hi[b])) * inverse;
  }
  r.mass_error = kBandMassError + (kBlockSums ? kBlockSumError : 0.0);
  return r;
}

PS_TARGET_AVX512 ExpBandResult exp_band_exact_avx512(const ExpBandParams& p) {
  const __m512 t = _mm512_set1_ps(p.temperature);
  const bool unit = p.temperature == 1.0f;
  const __m512 max_scaled = _mm512_set1_ps(p.max_scaled);
  const __m512d shift = _mm512_set1_pd(p.max_scaled);
  __m512 minus_above[kMaxBands];
  __m512d above_lo[kMaxBands], above_hi[kMaxBands];
  for (int b = 0; b < kMaxBands; ++b) {
    minus_above[b] = _mm512_set1_ps(-p.above[b]);
    above_lo[b] = above_hi[b] = _mm512_setzero_pd();
  }
  __m512d total_lo = _mm512_setzero_pd(), total_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < p.n; i += 16) {
    const __mmask16 m = tail_mask16(p.n - i);
    const __m512 raw = _mm512_maskz_loadu_ps(m, p.logits + i);
    const __m512 s = unit ? raw : _mm512_div_ps(raw, t);
    __m512d s_lo, s_hi;
    widen_to_pd(s, &s_lo, &s_hi);
    const __m512d e_lo =
        _mm512_maskz_mov_pd(static_cast<__mmask8>(m), exp_avx512_pd(_mm512_sub_pd(s_lo, shift)));
    const __m512d e_hi = _mm512_maskz_mov_pd(static_cast<__mmask8>(m >> 8),
                                             exp_avx512_pd(_mm512_sub_pd(s_hi, shift)));
    total_lo = _mm512_add_pd(total_lo, e_lo);
    total_hi = _mm512_add_pd(total_hi, e_hi);
    const __m512 minus_gap = _mm512_sub_ps(s, max_scaled);
    for (int b = 0; b < p.num_bands; ++b) {
      const __mmask16 before = _mm512_mask_cmp_ps_mask(m, minus_gap, minus_above[b], _CMP_GT_OQ);
      masked_accumulate(before, e_lo, e_hi, &above_lo[b], &above_hi[b]);
    }
  }
  ExpBandResult r;
  r.total = _mm512_reduce_add_pd(_mm512_add_pd(total_lo, total_hi));
  for (int b = 0; b < p.num_bands; ++b) {
    r.mass_above[b] = _mm512_reduce_add_pd(_mm512_add_pd(above_lo[b], above_hi[b]));
  }
  return r;
}

PS_TARGET_AVX512 void shifted_exp_f64_avx512(const float* scaled, int64_t n, double shift_value,
                                             double* out) {
  const __m512d shift = _mm512_set1_pd(shift_value);
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = static_cast<__mmask8>(tail_mask16(std::min<int64_t>(n - i, 8)));
    const __m512d s = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, scaled + i));
    _mm512_mask_storeu_pd(out + i, m, exp_avx512_pd(_mm512_sub_pd(s, shift)));
  }
}

// Eight elements a step: their masses are doubles. Compressed vectors are stored whole, as in
// exp_band_avx512.
PS_TARGET_AVX512 GapSplit split_by_gap_avx512(const float* scaled, const double* mass,
                                              const int32_t* ids, int64_t n, float max_scaled,
                                              float from, float to, float* out_scaled,
                                              double* out_mass, int32_t* out_ids) {
  const __m256 top = _mm256_set1_ps(max_scaled);
  const __m256 from_v = _mm256_set1_ps(from);
  const __m256 to_v = _mm256_set1_ps(to);
  __m512d before = _mm512_setzero_pd(), between = _mm512_setzero_pd();
  int64_t count = 0;
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = static_cast<__mmask8>(tail_mask16(std::min<int64_t>(n - i, 8)));
    const __m256 s = _mm256_maskz_loadu_ps(m, scaled + i);
    const __m512d e = _mm512_maskz_loadu_pd(m, mass + i);
    const __m256i id = _mm256_maskz_loadu_epi32(m, ids + i);
    const __m256 gap = _mm256_sub_ps(top, s);
    const __mmask8 lt_from = _mm256_mask_cmp_ps_mask(m, gap, from_v, _CMP_LT_OQ);
    const __mmask8 in = _mm256_mask_cmp_ps_mask(m, gap, from_v, _CMP_GE_OQ) &
                        _mm256_cmp_ps_mask(gap, to_v, _CMP_LT_OQ);
    before = _mm512_mask_add_pd(before, lt_from, before, e);
    between = _mm512_mask_add_pd(between, in, between, e);
    _mm256_storeu_ps(out_scaled + count, _mm256_maskz_compress_ps(in, s));
    _mm512_storeu_pd(out_mass + count, _mm512_maskz_compress_pd(in, e));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_ids + count),
                        _mm256_maskz_compress_epi32(in, id));
    count += __builtin_popcount(in);
  }
  return {_mm512_reduce_add_pd(before), _mm512_reduce_add_pd(between), count};
}

}  // namespace

BlockedRange row_block_max(const float* x, int64_t n, int64_t block, float* block_max, Isa isa) {
  assert(x != nullptr && n >= 1 && block > 0 && block % 16 == 0 && block_max != nullptr);
  if (isa == Isa::kAvx512) return row_block_max_avx512(x, n, block, block_max);
  return row_block_max_portable(x, n, block, block_max);
}

void scaled_exp_f32(const float* x, int64_t n, float temperature, float max_scaled, float* out,
                    Isa isa) {
  assert(x != nullptr && out != nullptr && n >= 0 && temperature > 0.0f);
  if (isa == Isa::kAvx512) return scaled_exp_f32_avx512(x, n, temperature, max_scaled, out);
  scaled_exp_f32_portable(x, n, temperature, max_scaled, out);
}

ExpBandResult exp_band(const ExpBandParams& p, Isa isa) {
  assert(p.logits != nullptr && p.n >= 0 && p.temperature > 0.0f && p.capacity >= 0);
  assert(p.exact || (p.band_ids != nullptr && p.band_scaled != nullptr && p.band_mass != nullptr));
  assert(p.num_bands >= 1 && p.num_bands <= kMaxBands);
  if (isa == Isa::kAvx512) {
    if (p.exact) return exp_band_exact_avx512(p);
    if (p.temperature == 1.0f) {
      return p.num_bands == 1 ? exp_band_avx512<1, true>(p) : exp_band_avx512<2, true>(p);
    }
    return p.num_bands == 1 ? exp_band_avx512<1, false>(p) : exp_band_avx512<2, false>(p);
  }
  return exp_band_portable(p);
}

void shifted_exp_f64(const float* scaled, int64_t n, double shift, double* out, Isa isa) {
  assert(scaled != nullptr && out != nullptr && n >= 0);
  if (isa == Isa::kAvx512) return shifted_exp_f64_avx512(scaled, n, shift, out);
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(static_cast<double>(scaled[i]) - shift);
}

GapSplit split_by_gap(const float* scaled, const double* mass, const int32_t* ids, int64_t n,
                      float max_scaled, float from, float to, float* out_scaled, double* out_mass,
                      int32_t* out_ids, Isa isa) {
  assert(n >= 0 && (n == 0 || (scaled != nullptr && mass != nullptr && ids != nullptr)));
  assert(out_scaled != nullptr && out_mass != nullptr && out_ids != nullptr);
  if (isa == Isa::kAvx512) {
    return split_by_gap_avx512(scaled, mass, ids, n, max_scaled, from, to, out_scaled, out_mass,
                               out_ids);
  }
  return split_by_gap_portable(scaled, mass, ids, n, max_scaled, from, to, out_scaled, out_mass,
                               out_ids);
}

}  // namespace pagedserve::kernels
