// quantize_row: float32 rows to ggml's block formats. Round to nearest within each block; the
// scale of a block (or of a K type's sub-block) is chosen among a few candidates by squared
// error, and the final quants are always recomputed against the scales as stored (f16, 6-bit
// or 8-bit), so what a reader dequantizes is as close to the input as those scales allow.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "kernels/cpu/kv_dtype.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_kernels.h"

namespace pagedserve::kernels {

namespace {

using detail::DecodedBlock;

// An f16 scale (bits) and its exact float value.
struct Half {
  uint16_t bits;
  float value;
};

Half to_half(float v) {
  const uint16_t bits = f32_to_f16(v);
  return {bits, f16_to_f32(bits)};
}

int round_clamp(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(lo))) return lo;  // also NaN
  return r > static_cast<float>(hi) ? hi : static_cast<int>(r);
}

// Symmetric blocks (Q4_0, Q5_0): value (u - offset) * d. Tries d = max / -offset (the
// extreme maps to the most negative quant, as ggml does) and d = amax / (offset - 1); keeps
// the one with the smaller squared error.
void quantize_symmetric(QuantType type, const float* x, DecodedBlock& out) {
  const int offset = detail::offset_of(type);
  const int qmax = (1 << detail::bits_of(type)) - 1 - offset;
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float candidates[2] = {max / static_cast<float>(-offset), amax / static_cast<float>(qmax)};
  double best_error = INFINITY;
  for (float candidate : candidates) {
    const Half d = to_half(candidate);
    DecodedBlock block;
    block.d = d.bits;
    double error = 0.0;
    for (int i = 0; i < 32; ++i) {
      const int q = d.value == 0.0f ? 0 : round_clamp(x[i] / d.value, -offset, qmax);
      block.u[i] = static_cast<uint8_t>(q + offset);
      const double diff = static_cast<double>(static_cast<float>(q) * d.value) - x[i];
      error += diff * diff;
    }
    if (error < best_error) {
      best_error = error;
      out = block;
    }
  }
}

// Q8_0 exactly as ggml's reference quantizer: d = amax / 127, q = round(x / d) half away from
// zero (no search: with 255 levels it gains little, and matching llama.cpp's bytes means a
// file quantized here is the file llama-quantize writes).
void quantize_q8_0(const float* x, DecodedBlock& out) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  out = DecodedBlock{};
  out.d = to_half(d).bits;
  for (int i = 0; i < 32; ++i) {
    const float r = std::round(x[i] * inverse);  // within [-127, 127] unless x is not finite
    const int q = r >= -127.0f && r <= 127.0f ? static_cast<int>(r) : (r > 0.0f ? 127 : -127);
    out.u[i] = static_cast<uint8_t>(q + 128);
  }
}

// Q5_1: value u * d + m with m the block minimum and d = (max - min) / 31.
void quantize_q5_1(const float* x, DecodedBlock& out) {
  float lo = x[0];
  float hi = x[0];
  for (int i = 1; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const Half d = to_half((hi - lo) / 31.0f);
  const Half m = to_half(lo);
  out = DecodedBlock{};
  out.d = d.bits;
  out.m = m.bits;
  for (int i = 0; i < 32; ++i) {
    out.u[i] =
        static_cast<uint8_t>(d.value == 0.0f ? 0 : round_clamp((x[i] - m.value) / d.value, 0, 31));
  }
}

// Least-squares fit of x ~ scale * L + bias over n values, bias <= 0 (the K types store a
// non-negative min subtracted); returns the squared error, or infinity for no valid fit.
double fit_affine(const float* x, const uint8_t* L, int n, float& scale, float& min) {
  double sl = 0, sl2 = 0, sx = 0, sxl = 0;
  for (int i = 0; i < n; ++i) {
    sl += L[i];
    sl2 += static_cast<double>(L[i]) * L[i];
    sx += x[i];
    sxl += static_cast<double>(x[i]) * L[i];
  }
  const double det = n * sl2 - sl * sl;
  if (det <= 0) return INFINITY;
  double s = (n * sxl - sl * sx) / det;
  double b = (sl2 * sx - sl * sxl) / det;
  if (b > 0) {
    b = 0;
    s = sxl / sl2;
  }
  if (s < 0) return INFINITY;
  scale = static_cast<float>(s);
  min = static_cast<float>(-b);
  double error = 0;
  for (int i = 0; i < n; ++i) {
    const double diff = s * L[i] + b - x[i];
    error += diff * diff;
  }
  return error;
}

// A sub-block of 32 for Q4_K/Q5_K: scale >= 0 and min >= 0 with x ~ scale * L - min,
// L in [0, qmax]; a grid of 21 starting scales, each refined by least squares.
void fit_sub_block_affine(const float* x, int qmax, float& scale, float& min) {
  float lo = std::min(0.0f, *std::min_element(x, x + 32));
  const float hi = *std::max_element(x, x + 32);
  scale = 0.0f;
  min = -lo;
  if (!(hi > lo)) return;
  scale = (hi - lo) / static_cast<float>(qmax);  // the plain min/max fit, always valid
  double best = 0;
  for (int i = 0; i < 32; ++i) {
    const double diff = scale * std::nearbyint((x[i] - lo) / scale) + lo - x[i];
    best += diff * diff;
  }
  for (int step = -10; step <= 10; ++step) {
    const float iscale = (static_cast<float>(qmax) + 0.1f * static_cast<float>(step)) / (hi - lo);
    uint8_t L[32];
    for (int i = 0; i < 32; ++i)
      L[i] = static_cast<uint8_t>(round_clamp(iscale * (x[i] - lo), 0, qmax));
    float s = 0.0f;
    float m = 0.0f;
    const double error = fit_affine(x, L, 32, s, m);
    if (error < best) {
      best = error;
      scale = s;
      min = m;
    }
  }
}

// Q4_K / Q5_K: per-sub-block scales and minima, then 6-bit codes against d = max scale / 63
// and dmin = max min / 63, then the quants against the stored scales.
void quantize_k_affine(QuantType type, const float* x, DecodedBlock& out) {
  const int qmax = (1 << detail::bits_of(type)) - 1;
  float scales[8];
  float mins[8];
  for (int j = 0; j < 8; ++j) fit_sub_block_affine(x + 32 * j, qmax, scales[j], mins[j]);
  const Half d = to_half(*std::max_element(scales, scales + 8) / 63.0f);
  const Half dmin = to_half(*std::max_element(mins, mins + 8) / 63.0f);
  out = DecodedBlock{};
  out.d = d.bits;
  out.m = dmin.bits;
  for (int j = 0; j < 8; ++j) {
    out.sc[j] = static_cast<int8_t>(d.value == 0.0f ? 0 : round_clamp(scales[j] / d.value, 0, 63));
    out.mn[j] =
        static_cast<uint8_t>(dmin.value == 0.0f ? 0 : round_clamp(mins[j] / dmin.value, 0, 63));
    const float d1 = d.value * static_cast<float>(out.sc[j]);  // as dequantization computes them
    const float m1 = dmin.value * static_cast<float>(out.mn[j]);
    for (int l = 0; l < 32; ++l) {
      const float v = x[32 * j + l];
      out.u[32 * j + l] =
          static_cast<uint8_t>(d1 == 0.0f ? 0 : round_clamp((v + m1) / d1, 0, qmax));
    }
  }
}

// A sub-block of 16 for Q6_K: a signed scale with x ~ scale * L, L in [-32, 31]; 19 starting
// scales around max / -32, each refined by least squares.
float fit_sub_block_symmetric(const float* x) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best_scale = max / -32.0f;
  double best = INFINITY;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(32.0f + 0.1f * static_cast<float>(step)) / max;
    double sxl = 0, sl2 = 0;
    int L[16];
    for (int i = 0; i < 16; ++i) {
      L[i] = round_clamp(iscale * x[i], -32, 31);
      sxl += static_cast<double>(x[i]) * L[i];
      sl2 += static_cast<double>(L[i]) * L[i];
    }
    if (sl2 == 0) continue;
    const double s = sxl / sl2;
    double error = 0;
    for (int i = 0; i < 16; ++i) error += (s * L[i] - x[i]) * (s * L[i] - x[i]);
    if (error < best) {
      best = error;
      best_scale = static_cast<float>(s);
    }
  }
  return best_scale;
}

void quantize_q6_k(const float* x, DecodedBlock& out) {
  float scales[16];
  float max_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_sub_block_symmetric(x + 16 * j);
    if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
  }
  const Half d = to_half(max_scale / -128.0f);
  out = DecodedBlock{};
  out.d = d.bits;
  for (int j = 0; j < 16; ++j) {
    out.sc[j] =
        static_cast<int8_t>(d.value == 0.0f ? 0 : round_clamp(scales[j] / d.value, -128, 127));
    const float d1 = d.value * static_cast<float>(out.sc[j]);
    for (int l = 0; l < 16; ++l) {
      const int q = d1 == 0.0f ? 0 : round_clamp(x[16 * j + l] / d1, -32, 31);
      out.u[16 * j + l] = static_cast<uint8_t>(q + 32);
    }
  }
}

}  // namespace

void quantize_row(QuantType type, const float* src, void* dst, int64_t n) {
  const int block = quant_block_elements(type);
  assert(n % block == 0);
  auto* bytes = static_cast<std::byte*>(dst);
  DecodedBlock decoded;
  for (int64_t b = 0; b < n / block; ++b) {
    const float* x = src + b * block;
    switch (type) {
      case QuantType::kQ8_0:
        quantize_q8_0(x, decoded);
        break;
      case QuantType::kQ4_0:
      case QuantType::kQ5_0:
        quantize_symmetric(type, x, decoded);
        break;
      case QuantType::kQ5_1:
        quantize_q5_1(x, decoded);
        break;
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:
        quantize_k_affine(type, x, decoded);
        break;
      case QuantType::kQ6_K:
        quantize_q6_k(x, decoded);
        break;
    }
    detail::encode_block(type, decoded, bytes + b * quant_block_bytes(type));
  }
}

}  // namespace pagedserve::kernels
