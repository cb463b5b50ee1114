// Row kernels of the CPU sampler: min/max, argmax, sum of exps and the bucketed histogram,
// each with a portable loop and an AVX-512 one (16 floats, or 8 doubles for the exps).
#include "kernels/cpu/sampling_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/exp_avx512_pd.h"

#if !defined(__clang__)  // GCC only: clang has no such warning and warns of the name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace pagedserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- portable ----

RowRange row_min_max_portable(const float* x, int64_t n) {
  RowRange r{kInf, -kInf};
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] < r.min) r.min = x[i];
    if (x[i] > r.max) r.max = x[i];
  }
  return r;
}

double row_sum_exp_portable(const float* x, int64_t n, double shift) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += std::exp(static_cast<double>(x[i]) - shift);
  return total;
}

double row_sum_exp_f32_portable(const float* x, int64_t n, float shift) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    // As the AVX-512 path: the gap clamped to e^-87 (NaN included), a float exp.
    const float gap = x[i] - shift;
    total += std::exp(gap >= -87.0f ? gap : -87.0f);
  }
  return total;
}

int bucket_of(float scaled, const ExpHistogramParams& p) {
  const float gap =
      std::min((p.max_scaled - scaled) * p.buckets_per_unit, static_cast<float>(p.num_buckets - 1));
  return gap >= 0.0f ? static_cast<int>(gap) : p.num_buckets - 1;  // NaN: the last bucket
}

double exp_histogram_portable(const ExpHistogramParams& p) {
  const double max_scaled = p.max_scaled;
  double total = 0.0;
  for (int64_t i = 0; i < p.n; ++i) {
    const float scaled = p.logits[i] / p.temperature;
    const int b = bucket_of(scaled, p);
    p.bucket[i] = static_cast<uint8_t>(b);
    if (p.bucket_count != nullptr) ++p.bucket_count[b];
    if (p.bucket_mass != nullptr) {
      const double e = std::exp(static_cast<double>(scaled) - max_scaled);
      p.bucket_mass[b] += e;
      total += e;
    }
  }
  return total;
}

// ---- AVX-512 ----

PS_TARGET_AVX512 RowRange row_min_max_avx512(const float* x, int64_t n) {
  __m512 lo = _mm512_set1_ps(kInf);
  __m512 hi = _mm512_set1_ps(-kInf);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    // min/max return the second operand when either is NaN: the running value survives.
    lo = _mm512_mask_min_ps(lo, m, v, lo);
    hi = _mm512_mask_max_ps(hi, m, v, hi);
  }
  return {_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi)};
}

PS_TARGET_AVX512 int64_t row_argmax_avx512(const float* x, int64_t n) {
  // Each lane keeps its first maximum (strictly greater replaces), so the lowest index among
  // the lanes holding the overall maximum is the first maximum of the row.
  __m512 best = _mm512_set1_ps(-kInf);
  __m512i best_index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i index = best_index;
  const __m512i step = _mm512_set1_epi32(16);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf), m, x + i);
    const __mmask16 greater = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, greater, v);
    best_index = _mm512_mask_mov_epi32(best_index, greater, index);
    index = _mm512_add_epi32(index, step);
  }
  const float top = _mm512_reduce_max_ps(best);
  const __mmask16 holders = _mm512_cmp_ps_mask(best, _mm512_set1_ps(top), _CMP_EQ_OQ);
  if (holders == 0) return 0;  // NaN everywhere
  return _mm512_mask_reduce_min_epi32(holders, best_index);
}

PS_TARGET_AVX512 float chunk_max_avx512(const float* x, int64_t n) {
  __m512 hi = _mm512_set1_ps(-kInf);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    // max returns the second operand when either is NaN: the running value survives.
    hi = _mm512_mask_max_ps(hi, m, _mm512_maskz_loadu_ps(m, x + i), hi);
  }
  return _mm512_reduce_max_ps(hi);
}

PS_TARGET_AVX512 void exp_pair(__m512 scaled, __m512d shift, __m512d* e_lo, __m512d* e_hi) {
  __m512d lo, hi;
  widen_to_pd(scaled, &lo, &hi);
  *e_lo = exp_avx512_pd(_mm512_sub_pd(lo, shift));
  *e_hi = exp_avx512_pd(_mm512_sub_pd(hi, shift));
}

PS_TARGET_AVX512 double row_sum_exp_avx512(const float* x, int64_t n, double shift_value) {
  const __m512d shift = _mm512_set1_pd(shift_value);
  __m512d acc_lo = _mm512_setzero_pd();
  __m512d acc_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf), m, x + i);
    __m512d e_lo, e_hi;
    exp_pair(v, shift, &e_lo, &e_hi);
    acc_lo = _mm512_add_pd(acc_lo, e_lo);
    acc_hi = _mm512_add_pd(acc_hi, e_hi);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(acc_lo, acc_hi));
}

PS_TARGET_AVX512 double row_sum_exp_f32_avx512(const float* x, int64_t n, float shift_value) {
  const __m512 shift = _mm512_set1_ps(shift_value);
  __m512d acc_lo = _mm512_setzero_pd();
  __m512d acc_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 e =
        _mm512_maskz_mov_ps(m, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), shift)));
    __m512d e_lo, e_hi;
    widen_to_pd(e, &e_lo, &e_hi);
    acc_lo = _mm512_add_pd(acc_lo, e_lo);
    acc_hi = _mm512_add_pd(acc_hi, e_hi);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(acc_lo, acc_hi));
}

PS_TARGET_AVX512 double exp_histogram_avx512(const ExpHistogramParams& p) {
  const __m512 temperature = _mm512_set1_ps(p.temperature);
  const bool unit_temperature = p.temperature == 1.0f;
  const __m512 max_scaled = _mm512_set1_ps(p.max_scaled);
  const __m512 per_unit = _mm512_set1_ps(p.buckets_per_unit);
  const __m512 last = _mm512_set1_ps(static_cast<float>(p.num_buckets - 1));
  const __m512d shift = _mm512_set1_pd(p.max_scaled);
  // The scalar updates are most of this pass. Two copies of the histogram, for even and odd
  // elements, halve the chains of dependent updates when neighbours share a bucket.
  int32_t count_odd[256] = {};
  double mass_odd[256] = {};
  alignas(64) int32_t idx[16];
  alignas(64) double e[16];
  __m512d total_lo = _mm512_setzero_pd();
  __m512d total_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < p.n; i += 16) {
    const __mmask16 m = tail_mask16(p.n - i);
    const __m512 raw = _mm512_maskz_loadu_ps(m, p.logits + i);
    // x / 1 is x: temperature 1 (the OpenAI default) skips the division, bit for bit the same.
    const __m512 scaled = unit_temperature ? raw : _mm512_div_ps(raw, temperature);
    // min returns its second operand for a NaN gap: NaNs go to the last bucket.
    const __m512 gap =
        _mm512_min_ps(_mm512_mul_ps(_mm512_sub_ps(max_scaled, scaled), per_unit), last);
    const __m512i b = _mm512_cvttps_epi32(gap);
    _mm512_mask_cvtepi32_storeu_epi8(p.bucket + i, m, b);
    _mm512_store_si512(idx, b);
    const int count = static_cast<int>(std::min<int64_t>(16, p.n - i));
    if (p.bucket_mass == nullptr) {
      for (int j = 0; j + 1 < count; j += 2) {
        ++p.bucket_count[idx[j]];
        ++count_odd[idx[j + 1]];
      }
      if (count & 1) ++p.bucket_count[idx[count - 1]];
      continue;
    }
    __m512d e_lo, e_hi;
    if (p.single_precision) {
      // float exp of the float gap: 16 lanes for the price of 8, widened for the sums.
      const __m512 ef = exp_avx512(_mm512_sub_ps(scaled, max_scaled));
      widen_to_pd(ef, &e_lo, &e_hi);
    } else {
      exp_pair(scaled, shift, &e_lo, &e_hi);
    }
    e_lo = _mm512_maskz_mov_pd(static_cast<__mmask8>(m), e_lo);
    e_hi = _mm512_maskz_mov_pd(static_cast<__mmask8>(m >> 8), e_hi);
    total_lo = _mm512_add_pd(total_lo, e_lo);
    total_hi = _mm512_add_pd(total_hi, e_hi);
    _mm512_store_pd(e, e_lo);
    _mm512_store_pd(e + 8, e_hi);
    if (p.bucket_count == nullptr) {  // masses only: one store per element, not two
      for (int j = 0; j + 1 < count; j += 2) {
        p.bucket_mass[idx[j]] += e[j];
        mass_odd[idx[j + 1]] += e[j + 1];
      }
      if (count & 1) p.bucket_mass[idx[count - 1]] += e[count - 1];
      continue;
    }
    for (int j = 0; j + 1 < count; j += 2) {
      ++p.bucket_count[idx[j]];
      p.bucket_mass[idx[j]] += e[j];
      ++count_odd[idx[j + 1]];
      mass_odd[idx[j + 1]] += e[j + 1];
    }
    if (count & 1) {
      ++p.bucket_count[idx[count - 1]];
      p.bucket_mass[idx[count - 1]] += e[count - 1];
    }
  }
  for (int b = 0; b < p.num_buckets; ++b) {
    if (p.bucket_count != nullptr) p.bucket_count[b] += count_odd[b];
    if (p.bucket_mass != nullptr) p.bucket_mass[b] += mass_odd[b];
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(total_lo, total_hi));
}

PS_TARGET_AVX512 int64_t collect_buckets_avx512(const uint8_t* bucket, int64_t n, int lo, int hi,
                                                int32_t* out) {
  const __m512i low = _mm512_set1_epi8(static_cast<char>(lo));
  const __m512i high = _mm512_set1_epi8(static_cast<char>(hi));
  int64_t count = 0;
  for (int64_t i = 0; i < n; i += 64) {
    const int64_t remaining = n - i;
    const __mmask64 m = remaining >= 64 ? ~__mmask64{0} : (__mmask64{1} << remaining) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(m, bucket + i);
    __mmask64 hits = _mm512_mask_cmpge_epu8_mask(m, v, low) & _mm512_cmple_epu8_mask(v, high);
    while (hits != 0) {
      out[count++] = static_cast<int32_t>(i + __builtin_ctzll(hits));
      hits &= hits - 1;
    }
  }
  return count;
}

}  // namespace

RowRange row_min_max(const float* x, int64_t n, Isa isa) {
  assert(x != nullptr && n >= 1);
  if (isa == Isa::kAvx512) return row_min_max_avx512(x, n);
  return row_min_max_portable(x, n);
}

float chunk_max(const float* x, int64_t n, Isa isa) {
  assert(x != nullptr && n >= 1);
  if (isa == Isa::kAvx512) return chunk_max_avx512(x, n);
  return row_min_max_portable(x, n).max;  // -inf when every element is NaN
}

void tile_chunk_maxima(const float* out, int64_t ldo, int m, int64_t first, int64_t cols,
                       float* maxima, int64_t stride, Isa isa) {
  for (int r = 0; r < m; ++r) maxima[r * stride] = chunk_max(out + r * ldo + first, cols, isa);
}

int64_t argmax_from_chunk_maxima(const float* x, int64_t n, const RowChunkMaxima& row) {
  assert(x != nullptr && row.maxima != nullptr && row.width > 0 && n >= 1);
  const int64_t num_chunks = (n + row.width - 1) / row.width;
  float top = -kInf;
  for (int64_t c = 0; c < num_chunks; ++c) top = std::max(top, row.maxima[c]);
  if (top == -kInf) return -1;
  for (int64_t c = 0; c < num_chunks; ++c) {
    if (row.maxima[c] != top) continue;
    // The first element equal to the maximum (NaN equals nothing): row_argmax's first maximum.
    for (int64_t i = c * row.width; i < std::min(n, (c + 1) * row.width); ++i) {
      if (x[i] == top) return i;
    }
  }
  return -1;  // unreachable for maxima that describe x
}

int64_t row_argmax(const float* x, int64_t n, Isa isa) {
  assert(x != nullptr && n >= 1);
  if (isa == Isa::kAvx512) return row_argmax_avx512(x, n);
  return std::max_element(x, x + n) - x;
}

double row_sum_exp(const float* x, int64_t n, double shift, Isa isa) {
  assert(x != nullptr && n >= 0);
  if (isa == Isa::kAvx512) return row_sum_exp_avx512(x, n, shift);
  return row_sum_exp_portable(x, n, shift);
}

double row_sum_exp_f32(const float* x, int64_t n, float shift, Isa isa) {
  assert(x != nullptr && n >= 0);
  if (isa == Isa::kAvx512) return row_sum_exp_f32_avx512(x, n, shift);
  return row_sum_exp_f32_portable(x, n, shift);
}

double exp_histogram(const ExpHistogramParams& p, Isa isa) {
  assert(p.logits != nullptr && p.bucket != nullptr);
  assert(p.bucket_count != nullptr || p.bucket_mass != nullptr);
  assert(p.num_buckets >= 1 && p.num_buckets <= 256 && p.temperature > 0.0f);
  if (p.bucket_count != nullptr) std::fill(p.bucket_count, p.bucket_count + p.num_buckets, 0);
  if (p.bucket_mass != nullptr) std::fill(p.bucket_mass, p.bucket_mass + p.num_buckets, 0.0);
  if (isa == Isa::kAvx512) return exp_histogram_avx512(p);
  return exp_histogram_portable(p);
}

int64_t collect_buckets(const uint8_t* bucket, int64_t n, int lo, int hi, int32_t* out, Isa isa) {
  assert(bucket != nullptr && out != nullptr && 0 <= lo && lo <= hi && hi <= 255);
  if (isa == Isa::kAvx512) return collect_buckets_avx512(bucket, n, lo, hi, out);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (bucket[i] >= lo && bucket[i] <= hi) out[count++] = static_cast<int32_t>(i);
  }
  return count;
}

void apply_token_bitmask(float* x, int64_t n, const uint32_t* bitmask, int64_t allowed_ids) {
  assert(x != nullptr && n >= 0 && allowed_ids >= 0);
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  const int64_t covered = std::min(n, allowed_ids);
  // A word at a time: inside a JSON string nearly every word is all ones (nothing to do),
  // between values nearly every word is zero (32 stores); only mixed words go bit by bit.
  for (int64_t first = 0; first < covered; first += 32) {
    const uint32_t word = bitmask[first / 32];
    const int64_t end = std::min(first + 32, covered);
    if (word == ~uint32_t{0}) continue;
    if (word == 0) {
      std::fill(x + first, x + end, kNever);
      continue;
    }
    for (int64_t i = first; i < end; ++i) {
      if (((word >> (i - first)) & 1u) == 0) x[i] = kNever;
    }
  }
  std::fill(x + covered, x + n, kNever);
}

}  // namespace pagedserve::kernels
