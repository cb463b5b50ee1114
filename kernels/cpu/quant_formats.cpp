// llama.cpp's block formats: names and sizes, ggml's byte layouts <-> DecodedBlock, and
// dequantization with exactly ggml's float operations (fp16 widened exactly, then the same
// products and sums in the same order; this file is built without fp contraction, as ISO C++
// builds are by default, so no product is fused into an add).
#include <algorithm>
#include <cassert>
#include <cctype>
#include <cstring>

#include "kernels/cpu/kv_dtype.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_kernels.h"

namespace pagedserve::kernels {

namespace {

constexpr QuantType kAllTypes[] = {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ5_0,
                                   QuantType::kQ5_1, QuantType::kQ4_K, QuantType::kQ5_K,
                                   QuantType::kQ6_K};

uint16_t load_u16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<unsigned>(p[0]) |
                               (std::to_integer<unsigned>(p[1]) << 8));
}

void store_u16(std::byte* p, uint16_t v) {
  p[0] = static_cast<std::byte>(v & 0xff);
  p[1] = static_cast<std::byte>(v >> 8);
}

uint8_t byte_at(const std::byte* p, int i) { return std::to_integer<uint8_t>(p[i]); }

// ggml's get_scale_min_k4: 8 six-bit scales and 8 six-bit minima in 12 bytes.
void unpack_scales_k4(const std::byte* s, int8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = static_cast<int8_t>(byte_at(s, j) & 63);
    mn[j] = byte_at(s, j + 4) & 63;
    sc[j + 4] = static_cast<int8_t>((byte_at(s, j + 8) & 0xf) | ((byte_at(s, j) >> 6) << 4));
    mn[j + 4] = static_cast<uint8_t>((byte_at(s, j + 8) >> 4) | ((byte_at(s, j + 4) >> 6) << 4));
  }
}

void pack_scales_k4(const int8_t* sc, const uint8_t* mn, std::byte* s) {
  for (int j = 0; j < 4; ++j) {
    const unsigned hi_sc = static_cast<unsigned>(sc[j + 4]) & 63;
    const unsigned hi_mn = mn[j + 4] & 63u;
    s[j] = static_cast<std::byte>((static_cast<unsigned>(sc[j]) & 63) | ((hi_sc >> 4) << 6));
    s[j + 4] = static_cast<std::byte>((mn[j] & 63u) | ((hi_mn >> 4) << 6));
    s[j + 8] = static_cast<std::byte>((hi_sc & 0xf) | ((hi_mn & 0xf) << 4));
  }
}

// Nibble halves of a 32-value chunk: byte j holds values j (low) and j + 16 (high) for the
// 32-blocks; the K types pair value l with l + 32 within each 64 (`stride`).
void decode_nibbles(const std::byte* qs, int count, int stride, uint8_t* u) {
  for (int j = 0; j < count; ++j) {
    const int base = (j / stride) * 2 * stride + j % stride;
    u[base] = byte_at(qs, j) & 0xf;
    u[base + stride] = byte_at(qs, j) >> 4;
  }
}

void encode_nibbles(const uint8_t* u, int count, int stride, std::byte* qs) {
  for (int j = 0; j < count; ++j) {
    const int base = (j / stride) * 2 * stride + j % stride;
    qs[j] = static_cast<std::byte>((u[base] & 0xf) | ((u[base + stride] & 0xf) << 4));
  }
}

void decode_q6_k(const std::byte* src, detail::DecodedBlock& out) {
  for (int h = 0; h < 2; ++h) {
    const std::byte* ql = src + 64 * h;
    const std::byte* qh = src + 128 + 32 * h;
    uint8_t* u = out.u + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const unsigned hi = byte_at(qh, l);
      u[l] = static_cast<uint8_t>((byte_at(ql, l) & 0xf) | ((hi & 3) << 4));
      u[l + 32] = static_cast<uint8_t>((byte_at(ql, l + 32) & 0xf) | (((hi >> 2) & 3) << 4));
      u[l + 64] = static_cast<uint8_t>((byte_at(ql, l) >> 4) | (((hi >> 4) & 3) << 4));
      u[l + 96] = static_cast<uint8_t>((byte_at(ql, l + 32) >> 4) | (((hi >> 6) & 3) << 4));
    }
  }
  for (int j = 0; j < 16; ++j) out.sc[j] = static_cast<int8_t>(byte_at(src, 192 + j));
  out.d = load_u16(src + 208);
}

void encode_q6_k(const detail::DecodedBlock& in, std::byte* dst) {
  for (int h = 0; h < 2; ++h) {
    std::byte* ql = dst + 64 * h;
    std::byte* qh = dst + 128 + 32 * h;
    const uint8_t* u = in.u + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<std::byte>((u[l] & 0xf) | ((u[l + 64] & 0xf) << 4));
      ql[l + 32] = static_cast<std::byte>((u[l + 32] & 0xf) | ((u[l + 96] & 0xf) << 4));
      qh[l] = static_cast<std::byte>(((u[l] >> 4) & 3) | (((u[l + 32] >> 4) & 3) << 2) |
                                     (((u[l + 64] >> 4) & 3) << 4) | (((u[l + 96] >> 4) & 3) << 6));
    }
  }
  for (int j = 0; j < 16; ++j) dst[192 + j] = static_cast<std::byte>(in.sc[j]);
  store_u16(dst + 208, in.d);
}

// Fifth bits: bit e of `qh` (e < count) is bit 4 of u[map(e)].
void decode_fifth_bits_32(const std::byte* qh, uint8_t* u) {
  for (int e = 0; e < 32; ++e)
    u[e] |= static_cast<uint8_t>(((byte_at(qh, e / 8) >> (e % 8)) & 1) << 4);
}

void encode_fifth_bits_32(const uint8_t* u, std::byte* qh) {
  for (int i = 0; i < 4; ++i) qh[i] = std::byte{0};
  for (int e = 0; e < 32; ++e) qh[e / 8] |= static_cast<std::byte>(((u[e] >> 4) & 1) << (e % 8));
}

}  // namespace

const char* quant_type_name(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:
      return "Q8_0";
    case QuantType::kQ4_0:
      return "Q4_0";
    case QuantType::kQ5_0:
      return "Q5_0";
    case QuantType::kQ5_1:
      return "Q5_1";
    case QuantType::kQ4_K:
      return "Q4_K";
    case QuantType::kQ5_K:
      return "Q5_K";
    case QuantType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

std::optional<QuantType> parse_quant_type(std::string_view name) {
  for (QuantType type : kAllTypes) {
    const std::string_view candidate = quant_type_name(type);
    if (candidate.size() != name.size()) continue;
    bool equal = true;
    for (size_t i = 0; i < name.size() && equal; ++i) {
      equal = std::toupper(static_cast<unsigned char>(name[i])) == candidate[i];
    }
    if (equal) return type;
  }
  return std::nullopt;
}

int quant_block_elements(QuantType type) {
  return type == QuantType::kQ4_K || type == QuantType::kQ5_K || type == QuantType::kQ6_K ? 256
                                                                                          : 32;
}

size_t quant_block_bytes(QuantType type) {
  constexpr size_t kBytes[] = {34, 18, 22, 24, 144, 176, 210};
  return kBytes[static_cast<int>(type)];
}

namespace detail {

void decode_block(QuantType type, const std::byte* src, DecodedBlock& out) {
  out = DecodedBlock{};
  switch (type) {
    case QuantType::kQ8_0:
      out.d = load_u16(src);
      for (int i = 0; i < 32; ++i) out.u[i] = static_cast<uint8_t>(byte_at(src, 2 + i) ^ 0x80);
      return;
    case QuantType::kQ4_0:
      out.d = load_u16(src);
      decode_nibbles(src + 2, 16, 16, out.u);
      return;
    case QuantType::kQ5_0:
      out.d = load_u16(src);
      decode_nibbles(src + 6, 16, 16, out.u);
      decode_fifth_bits_32(src + 2, out.u);
      return;
    case QuantType::kQ5_1:
      out.d = load_u16(src);
      out.m = load_u16(src + 2);
      decode_nibbles(src + 8, 16, 16, out.u);
      decode_fifth_bits_32(src + 4, out.u);
      return;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      out.d = load_u16(src);
      out.m = load_u16(src + 2);
      unpack_scales_k4(src + 4, out.sc, out.mn);
      const bool five = type == QuantType::kQ5_K;
      decode_nibbles(src + (five ? 48 : 16), 128, 32, out.u);
      if (five) {  // bit 2c (2c + 1) of qh[l]: value 64c + l (64c + 32 + l)
        for (int e = 0; e < 256; ++e) {
          const int bit = (e / 64) * 2 + (e % 64) / 32;
          out.u[e] |= static_cast<uint8_t>(((byte_at(src + 16, e % 32) >> bit) & 1) << 4);
        }
      }
      return;
    }
    case QuantType::kQ6_K:
      decode_q6_k(src, out);
      return;
  }
}

void encode_block(QuantType type, const DecodedBlock& in, std::byte* dst) {
  std::memset(dst, 0, quant_block_bytes(type));
  switch (type) {
    case QuantType::kQ8_0:
      store_u16(dst, in.d);
      for (int i = 0; i < 32; ++i) dst[2 + i] = static_cast<std::byte>(in.u[i] ^ 0x80);
      return;
    case QuantType::kQ4_0:
      store_u16(dst, in.d);
      encode_nibbles(in.u, 16, 16, dst + 2);
      return;
    case QuantType::kQ5_0:
      store_u16(dst, in.d);
      encode_fifth_bits_32(in.u, dst + 2);
      encode_nibbles(in.u, 16, 16, dst + 6);
      return;
    case QuantType::kQ5_1:
      store_u16(dst, in.d);
      store_u16(dst + 2, in.m);
      encode_fifth_bits_32(in.u, dst + 4);
      encode_nibbles(in.u, 16, 16, dst + 8);
      return;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      store_u16(dst, in.d);
      store_u16(dst + 2, in.m);
      pack_scales_k4(in.sc, in.mn, dst + 4);
      const bool five = type == QuantType::kQ5_K;
      encode_nibbles(in.u, 128, 32, dst + (five ? 48 : 16));
      if (five) {
        for (int e = 0; e < 256; ++e) {
          const int bit = (e / 64) * 2 + (e % 64) / 32;
          dst[16 + e % 32] |= static_cast<std::byte>(((in.u[e] >> 4) & 1) << bit);
        }
      }
      return;
    }
    case QuantType::kQ6_K:
      encode_q6_k(in, dst);
      return;
  }
}

void dequantize_decoded(QuantType type, const DecodedBlock& block, float* dst) {
  const float d = f16_to_f32(block.d);
  const float m = f16_to_f32(block.m);
  switch (type) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
    case QuantType::kQ5_0: {  // ggml: q * d, q the signed quant
      const int offset = offset_of(type);
      for (int i = 0; i < 32; ++i) dst[i] = static_cast<float>(block.u[i] - offset) * d;
      return;
    }
    case QuantType::kQ5_1:  // ggml: q * d + m
      for (int i = 0; i < 32; ++i) {
        const float scaled = static_cast<float>(block.u[i]) * d;
        dst[i] = scaled + m;
      }
      return;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:  // ggml: d1 = d * sc, m1 = dmin * m, then d1 * q - m1
      for (int j = 0; j < 8; ++j) {
        const float d1 = d * static_cast<float>(block.sc[j]);
        const float m1 = m * static_cast<float>(block.mn[j]);
        for (int l = 0; l < 32; ++l) {
          const float scaled = d1 * static_cast<float>(block.u[32 * j + l]);
          dst[32 * j + l] = scaled - m1;
        }
      }
      return;
    case QuantType::kQ6_K:  // ggml: d * sc * q, left to right
      for (int j = 0; j < 16; ++j) {
        const float d1 = d * static_cast<float>(block.sc[j]);
        for (int l = 0; l < 16; ++l) {
          dst[16 * j + l] = d1 * static_cast<float>(block.u[16 * j + l] - 32);
        }
      }
      return;
  }
}

}  // namespace detail

void dequantize_row(QuantType type, const void* src, float* dst, int64_t n) {
  const int block = quant_block_elements(type);
  assert(n % block == 0);
  const auto* bytes = static_cast<const std::byte*>(src);
  detail::DecodedBlock decoded;
  for (int64_t b = 0; b < n / block; ++b) {
    detail::decode_block(type, bytes + b * quant_block_bytes(type), decoded);
    detail::dequantize_decoded(type, decoded, dst + b * block);
  }
}

}  // namespace pagedserve::kernels
