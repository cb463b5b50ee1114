// Test-side references for the quantized formats, written from ggml-common.h's block layouts
// independently of kernels/cpu/quant_*.cpp: a block parser, ggml's dequantization, random
// blocks built byte by byte, and the activation quantization of quant_kernels.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant.h"

namespace pagedserve::kernels::testing {

inline constexpr QuantType kAllQuantTypes[] = {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ5_0,
                                               QuantType::kQ5_1, QuantType::kQ4_K, QuantType::kQ5_K,
                                               QuantType::kQ6_K};

inline bool is_k_quant(QuantType type) { return quant_block_elements(type) == 256; }

// IEEE half to float by its definition.
inline float half_value(const uint8_t* p) {
  const int h = p[0] | (p[1] << 8);
  const int exponent = (h >> 10) & 31;
  const int mantissa = h & 1023;
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -24)
                              : std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// One parsed block, in ggml's own terms: q is the integer ggml multiplies (signed for Q8_0,
// Q4_0, Q5_0 and Q6_K; 0..qmax for Q5_1, Q4_K, Q5_K); sc/mn the sub-block scales and minima.
struct RefBlock {
  float d = 0, m = 0;
  int sc[16] = {};
  int mn[8] = {};
  int q[256] = {};
};

inline RefBlock parse_block(QuantType type, const uint8_t* b) {
  RefBlock r;
  switch (type) {
    case QuantType::kQ8_0:
      r.d = half_value(b);
      for (int j = 0; j < 32; ++j) r.q[j] = static_cast<int8_t>(b[2 + j]);
      break;
    case QuantType::kQ4_0:
      r.d = half_value(b);
      for (int j = 0; j < 16; ++j) {
        r.q[j] = (b[2 + j] & 15) - 8;
        r.q[j + 16] = (b[2 + j] >> 4) - 8;
      }
      break;
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {
      const bool has_m = type == QuantType::kQ5_1;
      r.d = half_value(b);
      if (has_m) r.m = half_value(b + 2);
      const uint8_t* qh = b + (has_m ? 4 : 2);
      const uint8_t* qs = qh + 4;
      const uint32_t high =
          qh[0] | (qh[1] << 8) | (qh[2] << 16) | (static_cast<uint32_t>(qh[3]) << 24);
      for (int j = 0; j < 16; ++j) {
        r.q[j] = (qs[j] & 15) | (((high >> j) & 1) << 4);
        r.q[j + 16] = (qs[j] >> 4) | (((high >> (j + 16)) & 1) << 4);
        if (!has_m) r.q[j] -= 16, r.q[j + 16] -= 16;
      }
      break;
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      r.d = half_value(b);
      r.m = half_value(b + 2);
      const uint8_t* s = b + 4;
      for (int j = 0; j < 8; ++j) {  // ggml's get_scale_min_k4
        if (j < 4) {
          r.sc[j] = s[j] & 63;
          r.mn[j] = s[j + 4] & 63;
        } else {
          r.sc[j] = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
          r.mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
      }
      const bool five = type == QuantType::kQ5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          r.q[64 * c + l] = qs[32 * c + l] & 15;
          r.q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
          if (five) {
            r.q[64 * c + l] += (qh[l] >> (2 * c)) & 1 ? 16 : 0;
            r.q[64 * c + 32 + l] += (qh[l] >> (2 * c + 1)) & 1 ? 16 : 0;
          }
        }
      }
      break;
    }
    case QuantType::kQ6_K:
      r.d = half_value(b + 208);
      for (int j = 0; j < 16; ++j) r.sc[j] = static_cast<int8_t>(b[192 + j]);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b + 64 * h;
        const uint8_t* qh = b + 128 + 32 * h;
        for (int l = 0; l < 32; ++l) {
          r.q[128 * h + l] = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
          r.q[128 * h + l + 32] = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
          r.q[128 * h + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          r.q[128 * h + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        }
      }
      break;
  }
  return r;
}

// ggml's dequantize_row_* for one block, float operation for float operation.
inline void ref_dequantize_block(QuantType type, const uint8_t* bytes, float* y) {
  const RefBlock r = parse_block(type, bytes);
  switch (type) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
    case QuantType::kQ5_0:
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(r.q[j]) * r.d;
      break;
    case QuantType::kQ5_1:
      for (int j = 0; j < 32; ++j) {
        const float t = static_cast<float>(r.q[j]) * r.d;
        y[j] = t + r.m;
      }
      break;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
      for (int j = 0; j < 8; ++j) {
        const float d1 = r.d * static_cast<float>(r.sc[j]);
        const float m1 = r.m * static_cast<float>(r.mn[j]);
        for (int l = 0; l < 32; ++l) {
          const float t = d1 * static_cast<float>(r.q[32 * j + l]);
          y[32 * j + l] = t - m1;
        }
      }
      break;
    case QuantType::kQ6_K:
      for (int e = 0; e < 256; ++e) {
        const float t = r.d * static_cast<float>(r.sc[e / 16]);
        y[e] = t * static_cast<float>(r.q[e]);
      }
      break;
  }
}

inline std::vector<float> ref_dequantize_row(QuantType type, const std::vector<uint8_t>& row) {
  const size_t blocks = row.size() / quant_block_bytes(type);
  const int elements = quant_block_elements(type);
  std::vector<float> y(blocks * elements);
  for (size_t b = 0; b < blocks; ++b) {
    ref_dequantize_block(type, row.data() + b * quant_block_bytes(type), y.data() + b * elements);
  }
  return y;
}

// Random blocks, byte by byte; the f16 fields get finite halves (random sign, exponent 1..30 or
// a subnormal), every other byte is uniform.
inline std::vector<uint8_t> random_blocks(std::mt19937& rng, QuantType type, int blocks) {
  const size_t size = quant_block_bytes(type);
  std::vector<uint8_t> bytes(blocks * size);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : bytes) v = static_cast<uint8_t>(byte(rng));
  auto set_half = [&](uint8_t* p) {
    const int exponent = std::uniform_int_distribution<int>(0, 20)(rng);  // <= 2^5
    const int h = (byte(rng) & 1) << 15 | exponent << 10 | (byte(rng) << 2 | (byte(rng) & 3));
    p[0] = static_cast<uint8_t>(h & 255);
    p[1] = static_cast<uint8_t>(h >> 8);
  };
  for (int b = 0; b < blocks; ++b) {
    uint8_t* block = bytes.data() + b * size;
    if (type == QuantType::kQ6_K) {
      set_half(block + 208);
      continue;
    }
    set_half(block);
    if (type == QuantType::kQ5_1 || is_k_quant(type)) set_half(block + 2);
  }
  return bytes;
}

// The activation quantization of quant_kernels.h: blocks of `block` values, d = amax / 127,
// q = nearbyint(x * (127 / amax)); amax below 1e-30 counts as zero.
struct RefActs {
  std::vector<int> q;    // [k]
  std::vector<float> d;  // [k / block]
};

inline RefActs ref_quantize_activations(const float* x, int k, int block) {
  RefActs a;
  a.q.resize(k);
  for (int b = 0; b < k / block; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(x[b * block + i]));
    if (amax < 1e-30f) amax = 0.0f;
    a.d.push_back(amax / 127.0f);
    const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
    for (int i = 0; i < block; ++i) {
      a.q[b * block + i] = static_cast<int>(std::nearbyint(x[b * block + i] * id));
    }
  }
  return a;
}

}  // namespace pagedserve::kernels::testing
