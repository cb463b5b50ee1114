// matmul_quantized's AVX2 kernels (AVX2 + FMA + F16C, with AVX-VNNI's ymm vpdpbusd where the CPU
// has it) and the activation quantization: quant_matmul_avx512.cpp's algorithm on 256-bit
// vectors. Each 64-byte vector of the packed layout (quant_kernels.h) is two ymm, "half" 0 for
// columns 0-7 and half 1 for columns 8-15, each int32 lane one column and four consecutive k.
// For a group of up to kMaxRows activation rows, each block's 32-value chunks are decoded one
// half at a time into 8 ymm of quants and multiplied by every row's broadcast 4-byte activation
// groups; the integer sums are exact, and each row's float accumulator takes the block's fma(s)
// of quant_matmul.cpp's contract in block order, so the bits equal the portable kernel's.
//
// Without VNNI the products are vpmaddubsw + vpmaddwd, exact because no int16 pair saturates:
// Q4/Q5/Q6 quants are below 64 and activations within +-127, so one vpmaddubsw pair is at most
// 2 * 63 * 127 = 16002 and two of them still fit int16. Q8_0's unsigned quants reach 255, so
// that kernel works on the signed quants q = u - 128 (vpxor 0x80) as |q| * (a * sign(q))
// (vpabsb, vpsignb; a pair is at most 2 * 128 * 127 = 32512), which sums to sum u*a - 128 sum a.
//
// Only the PS_TARGET_AVX2 functions use AVX2; matmul_quantized calls them only where
// isa_supported(Isa::kAvx2) (and cpu_has_avx_vnni() for the VNNI forms, whose vpdpbusd is
// inline assembly so that GCC cannot form it where the CPU may lack it).
#include <immintrin.h>

#if defined(__x86_64__) && defined(__clang__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant_kernels.h"

#define PS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace pagedserve::kernels::detail {
namespace {

constexpr int kMaxRows = 4;  // activation rows per pass over a tile (16 ymm registers)

// Whether the decoded quants are Q8_0's signed q = u - 128 (the non-VNNI Q8_0 kernel).
template <QuantType T, bool kVnni>
constexpr bool kSignedQ8 = bits_of(T) == 8 && !kVnni;

PS_TARGET_AVX2 inline __m256i load(const std::byte* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

PS_TARGET_AVX2 inline __m128i load8(const std::byte* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

PS_TARGET_AVX2 inline __m256 load_f16(const std::byte* p) {
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}

PS_TARGET_AVX2 inline __m256i broadcast4(const int8_t* a) {
  int32_t v;
  std::memcpy(&v, a, 4);
  return _mm256_set1_epi32(v);
}

PS_TARGET_AVX2 inline __m256i vnni_dot(__m256i acc, __m256i u, __m256i a) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(a));
  return acc;
}

// acc + the dot products of each lane's quants in w[G0 .. G0+N) with the activations a + 4g.
template <QuantType T, bool kVnni, int G0, int N>
PS_TARGET_AVX2 inline __m256i dot(__m256i acc, const __m256i (&w)[8], const int8_t* a) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kVnni) {
#pragma GCC unroll 8
    for (int g = G0; g < G0 + N; ++g) acc = vnni_dot(acc, w[g], broadcast4(a + 4 * g));
  } else if constexpr (kSignedQ8<T, kVnni>) {
#pragma GCC unroll 8
    for (int g = G0; g < G0 + N; ++g) {
      const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w[g]),
                                                 _mm256_sign_epi8(broadcast4(a + 4 * g), w[g]));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
    }
  } else {
#pragma GCC unroll 4
    for (int g = G0; g < G0 + N; g += 2) {
      const __m256i pairs =
          _mm256_add_epi16(_mm256_maddubs_epi16(w[g], broadcast4(a + 4 * g)),
                           _mm256_maddubs_epi16(w[g + 1], broadcast4(a + 4 * g + 4)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
    }
  }
  return acc;
}

// Bit g of each byte of h moved to bit 4 (other bits are garbage).
template <int G>
PS_TARGET_AVX2 inline __m256i fifth_bit(__m256i h) {
  if constexpr (G < 4) return _mm256_slli_epi16(h, 4 - G);
  if constexpr (G == 4) return h;
  if constexpr (G > 4) return _mm256_srli_epi16(h, G - 4);
}

// Bits 2j..2j+1 of each byte of h moved to bits 4-5.
template <int J>
PS_TARGET_AVX2 inline __m256i sixth_bits(__m256i h) {
  if constexpr (J < 2) return _mm256_slli_epi16(h, 4 - 2 * J);
  if constexpr (J == 2) return h;
  if constexpr (J == 3) return _mm256_srli_epi16(h, 2);
}

PS_TARGET_AVX2 inline __m256i merge(__m256i w, __m256i bits, __m256i mask) {
  return _mm256_or_si256(w, _mm256_and_si256(bits, mask));
}

// Half h of the 8 vectors of quants of one 32-value chunk (see quant_kernels.h): unsigned, or
// signed q = u - 128 for kSignedQ8.
template <QuantType T, bool kVnni>
PS_TARGET_AVX2 inline void decode_half(const std::byte* p, int h, __m256i (&w)[8]) {
  const size_t half = 32 * static_cast<size_t>(h);
  if constexpr (bits_of(T) == 8) {
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      w[g] = load(p + 64 * g + half);
      if constexpr (kSignedQ8<T, kVnni>) w[g] = _mm256_xor_si256(w[g], bias);
    }
  } else {
    const __m256i low_mask = _mm256_set1_epi8(0x0f);
    const std::byte* low = p + high_bytes(T);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i packed = load(low + 64 * v + half);
      w[v] = _mm256_and_si256(packed, low_mask);
      w[v + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
    }
    if constexpr (bits_of(T) == 5) {
      const __m256i hb = load(p + half);
      const __m256i bit4 = _mm256_set1_epi8(0x10);
      w[0] = merge(w[0], fifth_bit<0>(hb), bit4);
      w[1] = merge(w[1], fifth_bit<1>(hb), bit4);
      w[2] = merge(w[2], fifth_bit<2>(hb), bit4);
      w[3] = merge(w[3], fifth_bit<3>(hb), bit4);
      w[4] = merge(w[4], fifth_bit<4>(hb), bit4);
      w[5] = merge(w[5], fifth_bit<5>(hb), bit4);
      w[6] = merge(w[6], fifth_bit<6>(hb), bit4);
      w[7] = merge(w[7], fifth_bit<7>(hb), bit4);
    } else if constexpr (bits_of(T) == 6) {
      const __m256i bits45 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
      for (int hv = 0; hv < 2; ++hv) {
        const __m256i hb = load(p + 64 * hv + half);
        __m256i* q = w + 4 * hv;
        q[0] = merge(q[0], sixth_bits<0>(hb), bits45);
        q[1] = merge(q[1], sixth_bits<1>(hb), bits45);
        q[2] = merge(q[2], sixth_bits<2>(hb), bits45);
        q[3] = merge(q[3], sixth_bits<3>(hb), bits45);
      }
    }
  }
}

// For the K types with minima, half h: the 8 sub-block minima of each column as int16 pairs,
// vector p lane c = (mn[2p][c], mn[2p + 1][c]).
PS_TARGET_AVX2 inline void min_pairs(const std::byte* mn, int h, __m256i (&pairs)[4]) {
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m128i a = load8(mn + 32 * p + 8 * h);
    const __m128i b = load8(mn + 32 * p + 16 + 8 * h);
    pairs[p] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b));
  }
}

// n = sum_j mn_j * (s16[2j] + s16[2j+1]) for one activation row (sums of 32 fit int16).
PS_TARGET_AVX2 inline __m256i min_sum(const __m256i (&pairs)[4], const int32_t* s16) {
  __m256i n = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const uint32_t lo = static_cast<uint16_t>(s16[4 * p] + s16[4 * p + 1]);
    const uint32_t hi = static_cast<uint16_t>(s16[4 * p + 2] + s16[4 * p + 3]);
    const __m256i a = _mm256_set1_epi32(static_cast<int32_t>(lo | (hi << 16)));
    n = _mm256_add_epi32(n, _mm256_madd_epi16(pairs[p], a));
  }
  return n;
}

// acc[h][r] += block b's contribution to columns 8h..8h+7 for each of the R rows, in the order
// of quant_matmul.cpp's contract (as quant_matmul_avx512.cpp's add_block).
template <QuantType T, bool kVnni, int R>
PS_TARGET_AVX2 __attribute__((always_inline)) inline void add_block(const ActRows& x,
                                                                    const std::byte* scales,
                                                                    const std::byte* quants, int b,
                                                                    __m256 (&acc)[2][R]) {
  constexpr int kElements = is_k(T) ? 256 : 32;
  const size_t ldq = x.ldq;
  const size_t lds = x.lds;
  const int nb = x.nb;
  const float* ad = x.ad;
  const int8_t* qb = x.q + static_cast<size_t>(b) * kElements;
  const int32_t* sb = x.sums + static_cast<size_t>(b) * (kElements / 16);
  for (int h = 0; h < 2; ++h) {
    const __m256 wd = load_f16(scales + 16 * h);
    if constexpr (!is_k(T)) {
      __m256i w[8];
      decode_half<T, kVnni>(quants, h, w);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int8_t* a = qb + r * ldq;
        const int32_t* s = sb + r * lds;
        const int offset = kSignedQ8<T, kVnni> ? 0 : offset_of(T);
        const __m256i i = dot<T, kVnni, 0, 8>(_mm256_set1_epi32(-offset * (s[0] + s[1])), w, a);
        const __m256 ad_r = _mm256_set1_ps(ad[r * nb + b]);
        acc[h][r] = _mm256_fmadd_ps(_mm256_mul_ps(wd, ad_r), _mm256_cvtepi32_ps(i), acc[h][r]);
        if constexpr (T == QuantType::kQ5_1) {
          const __m256 wm = load_f16(scales + 32 + 16 * h);
          acc[h][r] = _mm256_fmadd_ps(_mm256_mul_ps(wm, ad_r),
                                      _mm256_set1_ps(static_cast<float>(s[0] + s[1])), acc[h][r]);
        }
      }
    } else {
      __m256i isum[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
      const std::byte* chunk = quants + 256;
      for (int ch = 0; ch < 8; ++ch, chunk += chunk_bytes(T)) {
        __m256i w[8];
        decode_half<T, kVnni>(chunk, h, w);
        if constexpr (T == QuantType::kQ6_K) {
          const __m256i sc0 = _mm256_cvtepi8_epi32(load8(quants + 32 * ch + 8 * h));
          const __m256i sc1 = _mm256_cvtepi8_epi32(load8(quants + 32 * ch + 16 + 8 * h));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int8_t* a = qb + r * ldq + 32 * ch;
            const int32_t* s = sb + r * lds + 2 * ch;
            const __m256i t0 = dot<T, kVnni, 0, 4>(_mm256_set1_epi32(-32 * s[0]), w, a);
            const __m256i t1 = dot<T, kVnni, 4, 4>(_mm256_set1_epi32(-32 * s[1]), w, a);
            isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_mullo_epi32(t0, sc0),
                                                                 _mm256_mullo_epi32(t1, sc1)));
          }
        } else {
          const __m256i sc = _mm256_cvtepu8_epi32(load8(quants + 16 * ch + 8 * h));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int8_t* a = qb + r * ldq + 32 * ch;
            const __m256i t = dot<T, kVnni, 0, 8>(_mm256_setzero_si256(), w, a);
            isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(t, sc));
          }
        }
      }
      __m256 wm = _mm256_setzero_ps();
      __m256i pairs[4];
      if constexpr (T != QuantType::kQ6_K) {
        wm = load_f16(scales + 32 + 16 * h);
        min_pairs(quants + 128, h, pairs);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 ad_r = _mm256_set1_ps(ad[r * nb + b]);
        acc[h][r] =
            _mm256_fmadd_ps(_mm256_mul_ps(wd, ad_r), _mm256_cvtepi32_ps(isum[r]), acc[h][r]);
        if constexpr (T != QuantType::kQ6_K) {
          const __m256i n = min_sum(pairs, sb + r * lds);
          acc[h][r] = _mm256_fnmadd_ps(_mm256_mul_ps(wm, ad_r), _mm256_cvtepi32_ps(n), acc[h][r]);
        }
      }
    }
  }
}

// Columns of one tile (cols of them) for R activation rows starting at row r0, a group of
// blocks (their scale line, then their quants: quant_kernels.h) at a time.
template <QuantType T, bool kVnni, int R>
PS_TARGET_AVX2 void tile_rows(const QuantizedActs& x, const TileLayout& layout,
                              const std::byte* tile, int r0, float* out, int ldo, int cols,
                              bool first_pass) {
  const int nb = layout.blocks;
  const ActRows rows = act_rows(x, r0, nb);
  __m256 acc[2][R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
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
    float* o = out + static_cast<size_t>(r0 + r) * ldo;
    for (int h = 0; h < 2; ++h) {
      const int c = std::min(8, cols - 8 * h);
      if (c == 8) {
        _mm256_storeu_ps(o + 8 * h, acc[h][r]);
      } else if (c > 0) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, acc[h][r]);
        std::copy(lanes, lanes + c, o + 8 * h);
      }
    }
  }
}

template <QuantType T, bool kVnni>
void tile_all_rows(const QuantizedActs& x, const QuantizedWeight& w, const TileLayout& layout,
                   float* out, int ldo, int tile) {
  const std::byte* base = w.data() + tile * layout.tile_bytes;
  const int cols = std::min(kTileCols, w.rows() - tile * kTileCols);
  float* o = out + tile * kTileCols;
  int r = 0;
  for (; r + kMaxRows <= x.m; r += kMaxRows) {
    tile_rows<T, kVnni, kMaxRows>(x, layout, base, r, o, ldo, cols, r == 0);
  }
  switch (x.m - r) {
    case 3:
      return tile_rows<T, kVnni, 3>(x, layout, base, r, o, ldo, cols, r == 0);
    case 2:
      return tile_rows<T, kVnni, 2>(x, layout, base, r, o, ldo, cols, r == 0);
    case 1:
      return tile_rows<T, kVnni, 1>(x, layout, base, r, o, ldo, cols, r == 0);
    default:
      return;
  }
}

template <bool kVnni>
QuantTileFn select(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:
      return tile_all_rows<QuantType::kQ8_0, kVnni>;
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

PS_TARGET_AVX2 QuantizedActs quantize_activations_avx2(const float* x, int m, int k, int block,
                                                       std::byte* scratch) {
  const QuantizedActs acts = activation_layout(m, k, block, scratch);
  auto* q = const_cast<int8_t*>(acts.q);
  auto* d = const_cast<float*>(acts.d);
  auto* sums = const_cast<int32_t*>(acts.sums);
  const int nb = k / block;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (size_t b = 0; b < static_cast<size_t>(m) * nb; ++b) {
    const float* xb = x + b * block;
    __m256 vmax = _mm256_setzero_ps();
    for (int i = 0; i < block; i += 8) {
      vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(xb + i), abs_mask));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float amax = 0.0f;
    for (float v : lanes) amax = std::max(amax, v);
    if (!(amax >= kMinActivationAmax)) amax = 0.0f;
    d[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
    for (int i = 0; i < block; i += 16) {
      // vcvtps2dq rounds to nearest even, as nearbyint does; |q| <= 127, so the packs are exact.
      const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i), id));
      const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8), id));
      const __m128i w0 =
          _mm_packs_epi32(_mm256_castsi256_si128(q0), _mm256_extracti128_si256(q0, 1));
      const __m128i w1 =
          _mm_packs_epi32(_mm256_castsi256_si128(q1), _mm256_extracti128_si256(q1, 1));
      const __m128i q8 = _mm_packs_epi16(w0, w1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * block + i), q8);
      // The sum of the 16 quants: of q + 128 by vpsadbw, less 16 * 128.
      const __m128i sad = _mm_sad_epu8(_mm_xor_si128(q8, bias), _mm_setzero_si128());
      sums[(b * block + i) / 16] = _mm_cvtsi128_si32(sad) + _mm_extract_epi16(sad, 4) - 16 * 128;
    }
  }
  return acts;
}

bool cpu_has_avx_vnni() {
#if defined(__x86_64__) && defined(__clang__)
  // clang (14) has no "avxvnni" for __builtin_cpu_supports: CPUID leaf 7.1, EAX bit 4.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
  }();
  return has;
#elif defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avxvnni") != 0;
  return has;
#else
  return false;
#endif
}

QuantTileFn quant_tile_avx2(QuantType type, bool vnni) {
  return vnni ? select<true>(type) : select<false>(type);
}

}  // namespace pagedserve::kernels::detail
