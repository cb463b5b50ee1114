// The element types a CPU KV cache can store, and the scalar conversions to and from float32.
// Keys and values are computed in float32; a 16-bit cache rounds them once when they are
// written (round to nearest, ties to even, as vcvtps2ph and vLLM's casts do) and attention
// widens them exactly when it reads them, so the scalar and vector paths agree bit for bit.
// An int8 cache quantizes each (token, KV head) row of head_dim values symmetrically with one
// float32 scale (quantize_kv_row_int8), stored beside the block pool; attention multiplies a
// key row's dot product, and a value row's softmax weight, by the row's scale.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pagedserve::kernels {

enum class KvDtype { kFloat32, kFloat16, kBFloat16, kInt8 };

// Bytes per element (an int8 cache's scales are extra: kv_dtype_row_scale_bytes).
constexpr int kv_dtype_size(KvDtype dtype) {
  return dtype == KvDtype::kFloat32 ? 4 : dtype == KvDtype::kInt8 ? 1 : 2;
}
// Bytes of scale per (token, KV head) row of keys, and again of values: a float32 for int8.
constexpr int kv_dtype_row_scale_bytes(KvDtype dtype) { return dtype == KvDtype::kInt8 ? 4 : 0; }

constexpr const char* kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFloat16:
      return "float16";
    case KvDtype::kBFloat16:
      return "bfloat16";
    case KvDtype::kInt8:
      return "int8";
    default:
      return "float32";
  }
}

// "float32"/"fp32", "float16"/"fp16"/"half", "bfloat16"/"bf16", "int8"; nullopt for anything
// else (including "auto" and the fp8 names, which the caller resolves or refuses).
constexpr std::optional<KvDtype> parse_kv_dtype(std::string_view name) {
  if (name == "float32" || name == "fp32") return KvDtype::kFloat32;
  if (name == "float16" || name == "fp16" || name == "half") return KvDtype::kFloat16;
  if (name == "bfloat16" || name == "bf16") return KvDtype::kBFloat16;
  if (name == "int8") return KvDtype::kInt8;
  return std::nullopt;
}

// Rows whose largest magnitude is below this store zeros (127 / amax would overflow).
inline constexpr float kKvInt8MinAmax = 1e-30f;

// One row of an int8 cache: amax = max |x|, scale = amax / 127, q = nearbyint(x * (127 / amax))
// in float32 (round to nearest even, so |q| <= 127), the formula of the quantized matmuls'
// activations. Returns the scale; x[i] is approximated by q[i] * scale, within scale / 2. A
// non-finite value (a broken model's key) stores 0 rather than an undefined conversion.
inline float quantize_kv_row_int8(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float magnitude = std::fabs(x[i]);
    amax = magnitude > amax ? magnitude : amax;  // a NaN compares false: skipped
  }
  if (!(amax >= kKvInt8MinAmax) || !std::isfinite(amax)) {
    for (int i = 0; i < n; ++i) q[i] = 0;
    return 0.0f;
  }
  const float inverse = 127.0f / amax;
  // Adding and subtracting 1.5 * 2^23 rounds |v| < 2^22 to the nearest integer, ties to even
  // (the default rounding mode), as nearbyint does, without a libm call per element (which
  // made an int8 prefill ~30% slower than a float16 one).
  constexpr float kRound = 12582912.0f;
  for (int i = 0; i < n; ++i) {
    float product = x[i] * inverse;
#if defined(__x86_64__) || defined(__i386__)
    // Keeps a compiler allowed to contract from fusing the multiply into the add (an FMA
    // would round the exact product, not the float one).
    asm("" : "+x"(product));
#endif
    const float v = (product + kRound) - kRound;  // |v| <= 127 unless x[i] is NaN
    q[i] = v >= -127.0f && v <= 127.0f ? static_cast<int8_t>(v) : int8_t{0};
  }
  return amax / 127.0f;
}

// IEEE binary16 to float32, exact for every half (subnormals, infinities); NaNs come out quiet
// with their payload, as vcvtph2ps gives them.
constexpr float f16_to_f32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half >> 15) << 31;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) {
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0) {
    return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal: mantissa * 2^-24; normalise so the leading one becomes the implicit bit.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  const uint32_t biased = static_cast<uint32_t>(127 - 15 + 1 - shift);
  return std::bit_cast<float>(sign | (biased << 23) | ((mantissa & 0x3ffu) << 13));
}

// float32 to IEEE binary16, rounding to nearest even; overflow gives infinity, NaN stays a
// (quiet) NaN. The same bits as the F16C instruction vcvtps2ph with round-to-nearest.
constexpr uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet it, keep the top of the payload
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 and above (infinity included) round to infinity: 65504 is the largest half and
  // 65520 the tie between it and 2^16, which goes to the even side.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 113) {  // below 2^-14: a subnormal half (or zero), in units of 2^-24
    if (exponent < 101) return static_cast<uint16_t>(sign);  // below 2^-26: rounds to zero
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..25
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t tie = 1u << (shift - 1);
    if (rest > tie || (rest == tie && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((exponent - 112) << 10) | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry bumps the exponent
  return static_cast<uint16_t>(sign | half);
}

// BF16 is the top half of a binary32, so widening is a shift.
constexpr float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// float32 to bfloat16, rounding to nearest even; NaN stays a (quiet) NaN.
constexpr uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace pagedserve::kernels
