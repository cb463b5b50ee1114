// matmul_quantized's AVX-512 kernels (F+BW+VL, with VNNI's vpdpbusd where the CPU has it, else
// vpmaddubsw + vpmaddwd for the types whose quants fit in 7 bits) and the activation
// quantization. One 16-column tile is one zmm a vector: each int32 lane is one column, each
// lane four consecutive k (quant_kernels.h). For a group of up to kMaxRows activation rows, each
// 32-value chunk of a block is decoded once into 8 vectors of unsigned quants and multiplied by
// every row's broadcast 4-byte activation groups; the integer sums are exact, and each row's
// float accumulator takes the block's fma(s) of quant_matmul.cpp's contract in block order, so
// the bits equal the portable kernel's for any row grouping, m, thread split or ISA.
//
// Only the PS_TARGET functions use AVX-512; matmul_quantized calls them only where
// isa_supported(Isa::kAvx512) (and cpu_has_avx512_vnni() for the VNNI forms).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant_kernels.h"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

namespace pagedserve::kernels::detail {
namespace {

constexpr int kMaxRows = 8;              // activation rows per pass over a tile
constexpr __mmask16 kAllLanes = 0xffff;  // see matmul_avx512.cpp (GCC 12's undefined operands)

// acc += the dot products of each lane's 4 unsigned quants with the 4 activations at a, in
// int32. VNNI's instructions are written as inline assembly, so that every function here has
// one target (AVX-512 F+BW+VL) and GCC cannot form them where the CPU may lack them.
template <bool kVnni>
struct Dot;
template <>
struct Dot<true> {
  PS_TARGET_AVX512 static __m512i add(__m512i acc, __m512i u, const int8_t* a) {
    asm("vpdpbusd %2%{1to16%}, %1, %0"
        : "+v"(acc)
        : "v"(u), "m"(*reinterpret_cast<const int32_t*>(a)));
    return acc;
  }
  PS_TARGET_AVX512 static __m512i add_pairs(__m512i acc, __m512i w, __m512i a) {
    asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
    return acc;
  }
};
template <>
struct Dot<false> {  // exact only while u * a pairs fit int16: u < 128
  PS_TARGET_AVX512 static __m512i add(__m512i acc, __m512i u, const int8_t* a) {
    int32_t v;
    std::memcpy(&v, a, 4);
    const __m512i pairs = _mm512_maddubs_epi16(u, _mm512_set1_epi32(v));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
  }
  PS_TARGET_AVX512 static __m512i add_pairs(__m512i acc, __m512i w, __m512i a) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(w, a));
  }
};

PS_TARGET_AVX512 inline __m512i load(const std::byte* p) {
  return _mm512_load_si512(reinterpret_cast<const void*>(p));
}

PS_TARGET_AVX512 inline __m512 load_f16(const std::byte* p) {
  return _mm512_maskz_cvtph_ps(kAllLanes, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

// Bit g of each byte of h moved to bit 4 (other bits are garbage).
template <int G>
PS_TARGET_AVX512 inline __m512i fifth_bit(__m512i h) {
  if constexpr (G < 4) return _mm512_slli_epi16(h, 4 - G);
  if constexpr (G == 4) return h;
  if constexpr (G > 4) return _mm512_srli_epi16(h, G - 4);
}

// Bits 2j..2j+1 of each byte of h moved to bits 4-5.
template <int J>
PS_TARGET_AVX512 inline __m512i sixth_bits(__m512i h) {
  if constexpr (J < 2) return _mm512_slli_epi16(h, 4 - 2 * J);
  if constexpr (J == 2) return h;
  if constexpr (J == 3) return _mm512_srli_epi16(h, 2);
}

// The 8 vectors of unsigned quants of one 32-value chunk (see quant_kernels.h).
template <QuantType T>
PS_TARGET_AVX512 inline void decode_chunk(const std::byte* p, __m512i (&w)[8]) {
  if constexpr (bits_of(T) == 8) {
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) w[g] = load(p + 64 * g);
  } else {
    const __m512i low_mask = _mm512_set1_epi8(0x0f);
    const std::byte* low = p + high_bytes(T);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i packed = load(low + 64 * v);
      w[v] = _mm512_and_si512(packed, low_mask);
      w[v + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_mask);
    }
    // Ternary logic 0xf8: A | (B & C).
    if constexpr (bits_of(T) == 5) {
      const __m512i h = load(p);
      const __m512i bit4 = _mm512_set1_epi8(0x10);
      w[0] = _mm512_ternarylogic_epi32(w[0], fifth_bit<0>(h), bit4, 0xf8);
      w[1] = _mm512_ternarylogic_epi32(w[1], fifth_bit<1>(h), bit4, 0xf8);
      w[2] = _mm512_ternarylogic_epi32(w[2], fifth_bit<2>(h), bit4, 0xf8);
      w[3] = _mm512_ternarylogic_epi32(w[3], fifth_bit<3>(h), bit4, 0xf8);
      w[4] = _mm512_ternarylogic_epi32(w[4], fifth_bit<4>(h), bit4, 0xf8);
      w[5] = _mm512_ternarylogic_epi32(w[5], fifth_bit<5>(h), bit4, 0xf8);
      w[6] = _mm512_ternarylogic_epi32(w[6], fifth_bit<6>(h), bit4, 0xf8);
      w[7] = _mm512_ternarylogic_epi32(w[7], fifth_bit<7>(h), bit4, 0xf8);
    } else if constexpr (bits_of(T) == 6) {
      const __m512i bits45 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
      for (int hv = 0; hv < 2; ++hv) {
        const __m512i h = load(p + 64 * hv);
        __m512i* q = w + 4 * hv;
        q[0] = _mm512_ternarylogic_epi32(q[0], sixth_bits<0>(h), bits45, 0xf8);
        q[1] = _mm512_ternarylogic_epi32(q[1], sixth_bits<1>(h), bits45, 0xf8);
        q[2] = _mm512_ternarylogic_epi32(q[2], sixth_bits<2>(h), bits45, 0xf8);
        q[3] = _mm512_ternarylogic_epi32(q[3], sixth_bits<3>(h), bits45, 0xf8);
      }
    }
  }
}

// For the K types with minima: the 8 sub-block minima of each column as int16 pairs, vector p
// lane c = (mn[2p][c], mn[2p + 1][c]).
PS_TARGET_AVX512 inline void min_pairs(const std::byte* mn, __m512i (&pairs)[4]) {
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m128i a = _mm_load_si128(reinterpret_cast<const __m128i*>(mn + 32 * p));
    const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(mn + 32 * p + 16));
    const __m256i both = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
    pairs[p] = _mm512_maskz_cvtepu8_epi16(~__mmask32{0}, both);
  }
}

// n = sum_j mn_j * (s16[2j] + s16[2j+1]) for one activation row (sums of 32 fit int16).
template <bool kVnni>
PS_TARGET_AVX512 inline __m512i min_sum(const __m512i (&pairs)[4], const int32_t* s16) {
  const __m512i s = _mm512_loadu_si512(s16);
  const __m512i s32 = _mm512_add_epi32(s, _mm512_maskz_srli_epi64(0xff, s, 32));  // even lanes
  alignas(16) int32_t packed[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(packed), _mm512_maskz_cvtepi64_epi16(0xff, s32));
  __m512i n = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m512i a = _mm512_set1_epi32(packed[p]);
    n = Dot<kVnni>::add_pairs(n, pairs[p], a);
  }
  return n;
}

// acc[r] += block b's contribution for each of the R rows, in the order quant_matmul.cpp's
// contract gives (so calling it for b = 0, 1, ... gives the portable kernel's bits).
template <QuantType T, bool kVnni, int R>
PS_TARGET_AVX512 __attribute__((always_inline)) inline void add_block(const ActRows& x,
                                                                      const std::byte* scales,
                                                                      const std::byte* quants,
                                                                      int b, __m512 (&acc)[R]) {
  using D = Dot<kVnni>;
  constexpr int kElements = is_k(T) ? 256 : 32;
  const size_t ldq = x.ldq;
  const size_t lds = x.lds;
  const int nb = x.nb;
  const float* ad = x.ad;
  const __m512 wd = load_f16(scales);
  __m512i isum[R];
  const int8_t* qb = x.q + static_cast<size_t>(b) * kElements;
  const int32_t* sb = x.sums + static_cast<size_t>(b) * (kElements / 16);
  if constexpr (!is_k(T)) {
    __m512i w[8];
    decode_chunk<T>(quants, w);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int8_t* a = qb + r * ldq;
      const int32_t* s = sb + r * lds;
      __m512i i = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) i = D::add(i, w[g], a + 4 * g);
      isum[r] = _mm512_sub_epi32(i, _mm512_set1_epi32(offset_of(T) * (s[0] + s[1])));
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    const std::byte* chunk = quants + 256;
    for (int ch = 0; ch < 8; ++ch, chunk += chunk_bytes(T)) {
      __m512i w[8];
      decode_chunk<T>(chunk, w);
      if constexpr (T == QuantType::kQ6_K) {
        const auto* sc = reinterpret_cast<const __m128i*>(quants + 32 * ch);
        const __m512i sc0 = _mm512_maskz_cvtepi8_epi32(kAllLanes, _mm_load_si128(sc));
        const __m512i sc1 = _mm512_maskz_cvtepi8_epi32(kAllLanes, _mm_load_si128(sc + 1));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int8_t* a = qb + r * ldq + 32 * ch;
          const int32_t* s = sb + r * lds + 2 * ch;
          __m512i t0 = _mm512_set1_epi32(-32 * s[0]);
          __m512i t1 = _mm512_set1_epi32(-32 * s[1]);
#pragma GCC unroll 4
          for (int g = 0; g < 4; ++g) {
            t0 = D::add(t0, w[g], a + 4 * g);
            t1 = D::add(t1, w[g + 4], a + 4 * (g + 4));
          }
          isum[r] = _mm512_add_epi32(
              isum[r], _mm512_add_epi32(_mm512_mullo_epi32(t0, sc0), _mm512_mullo_epi32(t1, sc1)));
        }
      } else {
        const __m512i sc = _mm512_maskz_cvtepu8_epi32(
            kAllLanes, _mm_load_si128(reinterpret_cast<const __m128i*>(quants + 16 * ch)));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int8_t* a = qb + r * ldq + 32 * ch;
          __m512i t = _mm512_setzero_si512();
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) t = D::add(t, w[g], a + 4 * g);
          isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(t, sc));
        }
      }
    }
  }
  if constexpr (T == QuantType::kQ4_K || T == QuantType::kQ5_K) {
    const __m512 wm = load_f16(scales + 32);
    __m512i pairs[4];
    min_pairs(quants + 128, pairs);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 ad_r = _mm512_set1_ps(ad[r * nb + b]);
      const __m512i n = min_sum<kVnni>(pairs, sb + r * lds);
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(wd, ad_r),
                               _mm512_maskz_cvtepi32_ps(kAllLanes, isum[r]), acc[r]);
      acc[r] =
          _mm512_fnmadd_ps(_mm512_mul_ps(wm, ad_r), _mm512_maskz_cvtepi32_ps(kAllLanes, n), acc[r]);
    }
  } else if constexpr (T == QuantType::kQ5_1) {
    const __m512 wm = load_f16(scales + 32);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 ad_r = _mm512_set1_ps(ad[r * nb + b]);
      const int32_t* s = sb + r * lds;
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(wd, ad_r),
                               _mm512_maskz_cvtepi32_ps(kAllLanes, isum[r]), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(wm, ad_r),
                               _mm512_set1_ps(static_cast<float>(s[0] + s[1])), acc[r]);
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 ad_r = _mm512_set1_ps(ad[r * nb + b]);
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(wd, ad_r),
                               _mm512_maskz_cvtepi32_ps(kAllLanes, isum[r]), acc[r]);
    }
  }
}

// Columns of one tile for R activation rows starting at row r0, a group of blocks (their scale
// line, then their quants: quant_kernels.h) at a time.
template <QuantType T, bool kVnni, int R>
PS_TARGET_AVX512 void tile_rows(const QuantizedActs& x, const TileLayout& layout,
                                const std::byte* tile, int r0, float* out, int ldo,
                                __mmask16 store_mask, bool first_pass) {
  const int nb = layout.blocks;
  const ActRows rows = act_rows(x, r0, nb);
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  constexpr size_t kBlockBytes = tile_block_bytes(T);
  // A group (a scale line, then one or two blocks' quants) at a time: a tile is one stream,
  // prefetched in software only by passes of several rows (quant_kernels.h).
  constexpr int kGroup = tile_group_blocks(T);
  const std::byte* group = tile;
  for (int b = 0; b < nb; b += kGroup, group += tile_group_bytes(T)) {
    if constexpr (R > 1) {
      if (first_pass) prefetch_ahead<tile_group_bytes(T)>(group);
    }
    add_block<T, kVnni, R>(rows, group, group + kTileScaleLine, b, acc);
    if constexpr (kGroup == 2) {
      if (b + 1 < nb) {
        add_block<T, kVnni, R>(rows, group + tile_scale_bytes(T),
                               group + kTileScaleLine + kBlockBytes, b + 1, acc);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(out + static_cast<size_t>(r0 + r) * ldo, store_mask, acc[r]);
  }
}

template <QuantType T, bool kVnni>
void tile_all_rows(const QuantizedActs& x, const QuantizedWeight& w, const TileLayout& layout,
                   float* out, int ldo, int tile) {
  const std::byte* base = w.data() + tile * layout.tile_bytes;
  const int cols = std::min(kTileCols, w.rows() - tile * kTileCols);
  const auto mask = static_cast<__mmask16>((1u << cols) - 1);
  float* o = out + tile * kTileCols;
  int r = 0;
  for (; r + kMaxRows <= x.m; r += kMaxRows) {
    tile_rows<T, kVnni, kMaxRows>(x, layout, base, r, o, ldo, mask, r == 0);
  }
  switch (x.m - r) {
    case 7:
      return tile_rows<T, kVnni, 7>(x, layout, base, r, o, ldo, mask, r == 0);
    case 6:
      return tile_rows<T, kVnni, 6>(x, layout, base, r, o, ldo, mask, r == 0);
    case 5:
      return tile_rows<T, kVnni, 5>(x, layout, base, r, o, ldo, mask, r == 0);
    case 4:
      return tile_rows<T, kVnni, 4>(x, layout, base, r, o, ldo, mask, r == 0);
    case 3:
      return tile_rows<T, kVnni, 3>(x, layout, base, r, o, ldo, mask, r == 0);
    case 2:
      return tile_rows<T, kVnni, 2>(x, layout, base, r, o, ldo, mask, r == 0);
    case 1:
      return tile_rows<T, kVnni, 1>(x, layout, base, r, o, ldo, mask, r == 0);
    default:
      return;
  }
}

template <bool kVnni>
QuantTileFn select(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:  // u up to 255: vpmaddubsw would saturate
      return kVnni ? tile_all_rows<QuantType::kQ8_0, kVnni> : nullptr;
    case QuantType::kQ4_0:
      return tile_all_rows<QuantType::kQ4_0, kVnni>;
    case QuantType::kQ5_0:
      return tile_all_rows<QuantType::kQ5_0, kVnni>;
    case QuantType::kQ5_1:
      return tile_all_rows<QuantType::kQ5_1, kVnni>;
    case QuantType::kQ4_K:
      return tile_all_rows<QuantType::kQ4_K, kVnni>;
    case QuantType::kQ5_K:
      return tile_all_rows<QuantType::kQ5_K, kVnni>;
    case QuantType::kQ6_K:
      return tile_all_rows<QuantType::kQ6_K, kVnni>;
  }
  return nullptr;
}

}  // namespace

PS_TARGET_AVX512 QuantizedActs quantize_activations_avx512(const float* x, int m, int k, int block,
                                                           std::byte* scratch) {
  const QuantizedActs acts = activation_layout(m, k, block, scratch);
  auto* q = const_cast<int8_t*>(acts.q);
  auto* d = const_cast<float*>(acts.d);
  auto* sums = const_cast<int32_t*>(acts.sums);
  const int nb = k / block;
  for (size_t b = 0; b < static_cast<size_t>(m) * nb; ++b) {
    const float* xb = x + b * block;
    __m512 vmax = _mm512_setzero_ps();
    for (int i = 0; i < block; i += 16) {
      vmax = _mm512_maskz_max_ps(kAllLanes, vmax, _mm512_abs_ps(_mm512_loadu_ps(xb + i)));
    }
    // (GCC 12's _mm512_reduce_* start from undefined operands; see kAllLanes.)
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, vmax);
    float amax = 0.0f;
    for (float v : lanes) amax = std::max(amax, v);
    if (!(amax >= kMinActivationAmax)) amax = 0.0f;
    d[b] = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
    for (int i = 0; i < block; i += 16) {
      // vcvtps2dq rounds to nearest even, as nearbyint does in the default rounding mode.
      const __m512i qi =
          _mm512_maskz_cvtps_epi32(kAllLanes, _mm512_mul_ps(_mm512_loadu_ps(xb + i), id));
      const __m128i q8 = _mm512_maskz_cvtepi32_epi8(kAllLanes, qi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * block + i), q8);
      // The sum of the 16 quants: of q + 128 by vpsadbw, less 16 * 128.
      const __m128i sad = _mm_sad_epu8(_mm_xor_si128(q8, bias), _mm_setzero_si128());
      sums[(b * block + i) / 16] = _mm_cvtsi128_si32(sad) + _mm_extract_epi16(sad, 4) - 16 * 128;
    }
  }
  return acts;
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

QuantTileFn quant_tile_avx512(QuantType type, bool vnni) {
  return vnni ? select<true>(type) : select<false>(type);
}

}  // namespace pagedserve::kernels::detail
