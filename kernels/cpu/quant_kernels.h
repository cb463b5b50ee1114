// Internals of the quantized kernels (kernels/cpu/quant.h): a block in a format-neutral
// decoded form, the packed tile layout, the quantized activations and the per-ISA tile hooks.
// Not for use outside kernels/cpu and its tests.
//
// Packed layout. A QuantizedWeight is ceil(n / 16) tiles of kTileCols = 16 output rows
// (columns of the product), one after another; the last tile is padded with all-zero columns.
// Every quant is stored unsigned, u = q + offset (Q8_0: +128, Q4_0: +8, Q5_0: +16, Q6_K: +32;
// Q5_1 and Q4_K/Q5_K are unsigned already), so a VNNI kernel multiplies weights (u8) by
// activations (s8) with vpdpbusd and folds the offset back with the activations' block sums.
// A tile of nb blocks is one stream of groups, each a 64-byte line of scales followed by the
// quants of the group's blocks: 2 blocks a group for Q8_0, Q4_0 and Q5_0 (32 bytes of scales
// each; the tile's last group may hold one, its line half zero), 1 for the others. For a block:
//   scales: f16 d[16] then, for Q5_1 / Q4_K / Q5_K, f16 m[16] (the min, dmin for the K types):
//     ggml's f16 bits, widened exactly (vcvtph2ps) by the kernels; Q6_K's line is half padding;
//   quants: K types only: the sub-block scales unpacked to one byte each, column-minor:
//       Q4_K/Q5_K: u8 sc[8][16] then u8 min[8][16]; Q6_K: s8 sc[16][16]   (256 bytes)
//     then for each 32-element chunk of the block (1 or 8 chunks):
//       Q5_0/Q5_1/Q5_K: the fifth bits, 64 bytes; Q6_K: bits 4-5, 128 bytes (see below)
//       Q8_0: 512 bytes; the others: 256 bytes of low nibbles.
// So a tile holds as many bytes as ggml's rows, 3% more for Q4_K / Q5_K (the sub-block scales
// a byte each) and 1% more for Q6_K (the padding). Why a tile is one stream: with all its
// blocks' scales first and the quants after, a batch-1 product read memory at 0.75-0.85 of a
// plain read loop on this machine's Zen 5 cores, whatever the software prefetch; read front to
// back it reads as fast as the loop (docs/PERFORMANCE.md, "One stream a tile").
// Within a chunk, "vector g" (g = 0..7) is 64 bytes in which byte 4c + i is u[column c][4g+i]:
// a zmm of 16 int32 lanes, one column a lane, each lane four consecutive k (the operand order
// of vpdpbusd against a broadcast 4-byte activation group). Q8_0 stores vectors 0..7 as they
// are. Nibble types store 4 vectors: vector v's low nibbles are vector g = v, its high nibbles
// g = v + 4. Fifth bits: byte 4c + i has, in bit g, bit 4 of u[c][4g+i]. Q6_K bits 4-5:
// vector h = 0, 1, byte 4c + i has, in bits 2j..2j+1, bits 4-5 of u[c][4(4h+j)+i].
#pragma once

#include <cstddef>
#include <cstdint>

#include <xmmintrin.h>

#include "kernels/cpu/quant.h"

namespace pagedserve::kernels::detail {

constexpr int kTileCols = 16;

// One block of any type in a neutral form: f16 scale bits, unpacked sub-block scales and the
// unsigned quants (u - offset_of(type) is ggml's signed quant where there is one).
struct DecodedBlock {
  uint16_t d = 0;      // f16 bits of d
  uint16_t m = 0;      // f16 bits of m (Q5_1) or dmin (Q4_K, Q5_K)
  int8_t sc[16] = {};  // Q4_K/Q5_K: 8 six-bit scales; Q6_K: 16 signed scales
  uint8_t mn[8] = {};  // Q4_K/Q5_K: 8 six-bit minima
  uint8_t u[256] = {};
};

// ggml block bytes <-> DecodedBlock (unaligned input is fine).
void decode_block(QuantType type, const std::byte* src, DecodedBlock& out);
void encode_block(QuantType type, const DecodedBlock& in, std::byte* dst);
// The block's values, with exactly ggml's float operations.
void dequantize_decoded(QuantType type, const DecodedBlock& block, float* dst);

// ---- Per-type constants --------------------------------------------------------------------
// Usable at compile time (the SIMD kernels are templates on the type): K type (256-value blocks
// with sub-block scales), a minimum per block, bits per quant, the offset that makes quants
// unsigned (128, 8, 16, 0, 0, 0, 32), and, for the tile layout below, a block's bytes of f16
// scales and a 32-value chunk's bytes of quants (high bits, then low nibbles or bytes).
constexpr bool is_k(QuantType t) {
  return t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ6_K;
}
constexpr bool has_min(QuantType t) {
  return t == QuantType::kQ5_1 || t == QuantType::kQ4_K || t == QuantType::kQ5_K;
}
constexpr int bits_of(QuantType t) {
  switch (t) {
    case QuantType::kQ8_0:
      return 8;
    case QuantType::kQ4_0:
    case QuantType::kQ4_K:
      return 4;
    case QuantType::kQ6_K:
      return 6;
    default:
      return 5;
  }
}
constexpr int offset_of(QuantType t) {
  return t == QuantType::kQ8_0   ? 128
         : t == QuantType::kQ4_0 ? 8
         : t == QuantType::kQ5_0 ? 16
         : t == QuantType::kQ6_K ? 32
                                 : 0;
}
// A block's bytes of f16 scales, and of quants (a K block's 256 bytes of sub-block scales and
// minima, then its 8 chunks; otherwise one chunk).
constexpr int tile_scale_bytes(QuantType t) { return has_min(t) ? 64 : 32; }
constexpr int high_bytes(QuantType t) { return bits_of(t) == 5 ? 64 : bits_of(t) == 6 ? 128 : 0; }
constexpr int chunk_bytes(QuantType t) { return high_bytes(t) + (bits_of(t) == 8 ? 512 : 256); }
constexpr size_t tile_block_bytes(QuantType t) {
  return is_k(t) ? 256 + 8 * static_cast<size_t>(chunk_bytes(t)) : chunk_bytes(t);
}

// ---- Tile layout ----------------------------------------------------------------------------

constexpr size_t kTileScaleLine = 64;  // a group's scales: one cache line
constexpr int tile_group_blocks(QuantType t) {
  return is_k(t) ? 1 : static_cast<int>(kTileScaleLine) / tile_scale_bytes(t);
}
constexpr size_t tile_group_bytes(QuantType t) {
  return kTileScaleLine + tile_group_blocks(t) * tile_block_bytes(t);
}
// Where block b's scales and quants start in its tile.
constexpr size_t tile_scale_offset(QuantType t, int b) {
  return (b / tile_group_blocks(t)) * tile_group_bytes(t) +
         (b % tile_group_blocks(t)) * static_cast<size_t>(tile_scale_bytes(t));
}
constexpr size_t tile_quant_offset(QuantType t, int b) {
  return (b / tile_group_blocks(t)) * tile_group_bytes(t) + kTileScaleLine +
         (b % tile_group_blocks(t)) * tile_block_bytes(t);
}

// A kernel's pass of several activation rows over a tile does several times the work per byte
// of a one-row pass, enough that the hardware prefetcher falls behind: the pass that streams
// the tile from memory prefetches each group's lines kTilePrefetchAheadBytes on (the next
// tiles, which parallel_for_contiguous usually gives the same thread). Without, on AVX-512,
// batch-4 Q8_0 decode ran ~35% slower and batch 32 10-20%; one row reads as fast without (with
// them, Q4_K_M batch-1 decode was slower).
constexpr uintptr_t kTilePrefetchAheadBytes = 8192;
template <size_t kBytes>
inline void prefetch_ahead(const std::byte* p) {
  // An integer address: it may lie past the allocation, which a prefetch ignores and pointer
  // arithmetic may not. kBytes is a constant, so the loop unrolls into straight-line code.
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kTilePrefetchAheadBytes;
#pragma GCC unroll 64
  for (size_t off = 0; off < kBytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(ahead + off), _MM_HINT_T0);
  }
}

struct TileLayout {
  int blocks = 0;         // nb = k / block elements
  size_t tile_bytes = 0;  // every group's scale line and every block's quants
};
TileLayout tile_layout(QuantType type, int k);

// The kernels load quants with aligned 64-byte loads, so every block's quants start on a line.
static_assert(tile_block_bytes(QuantType::kQ8_0) % kTileScaleLine == 0 &&
              tile_block_bytes(QuantType::kQ4_0) % kTileScaleLine == 0 &&
              tile_block_bytes(QuantType::kQ5_0) % kTileScaleLine == 0 &&
              tile_block_bytes(QuantType::kQ5_1) % kTileScaleLine == 0 &&
              tile_block_bytes(QuantType::kQ4_K) % kTileScaleLine == 0 &&
              tile_block_bytes(QuantType::kQ5_K) % kTileScaleLine == 0 &&
              tile_block_bytes(QuantType::kQ6_K) % kTileScaleLine == 0);

// Writes block `b` of column `col` (0..15) into a tile; reads it back.
void pack_tile_block(QuantType type, const DecodedBlock& block, int b, int col, std::byte* tile);
void unpack_tile_block(QuantType type, const std::byte* tile, int b, int col, DecodedBlock& out);

// ---- Quantized activations ----------------------------------------------------------------
// Each row of x is cut into blocks of `block` (32, or 256 for the K types) values:
//   amax = max |x|, d = amax / 127, q = nearbyint(x * (amax != 0 ? 127 / amax : 0))
// in float32 with round-to-nearest-even (so |q| <= 127; a SIMD path computes the same bits
// with vmaxps / vdivps / vmulps / vcvtps2dq). sums[j] is the sum of q over values 16j..16j+15.
struct QuantizedActs {
  int m = 0;
  int k = 0;
  int block = 32;
  const int8_t* q = nullptr;      // [m, k]
  const float* d = nullptr;       // [m, k / block]
  const int32_t* sums = nullptr;  // [m, k / 16]
};
// Blocks with amax below this quantize to zero (127 / amax would overflow float).
constexpr float kMinActivationAmax = 1e-30f;
// Bytes of scratch quantize_activations needs, where its arrays lie in it (64-aligned), and the
// quantization into it; the AVX-512 and AVX2 forms give the same bits.
size_t activation_scratch_bytes(int m, int k, int block);
QuantizedActs activation_layout(int m, int k, int block, std::byte* scratch);
QuantizedActs quantize_activations(const float* x, int m, int k, int block, std::byte* scratch);
QuantizedActs quantize_activations_avx512(const float* x, int m, int k, int block,
                                          std::byte* scratch);
QuantizedActs quantize_activations_avx2(const float* x, int m, int k, int block,
                                        std::byte* scratch);

// The activation rows a kernel's pass over a tile multiplies: x's from row r0 on.
struct ActRows {
  const int8_t* q;      // row r's quants at q + r * ldq
  const float* ad;      // row r's block scales at ad + r * nb
  const int32_t* sums;  // row r's 16-value sums at sums + r * lds
  size_t ldq, lds;
  int nb;
};
inline ActRows act_rows(const QuantizedActs& x, int r0, int nb) {
  return {x.q + r0 * static_cast<size_t>(x.k),
          x.d + static_cast<size_t>(r0) * nb,
          x.sums + r0 * static_cast<size_t>(x.k / 16),
          static_cast<size_t>(x.k),
          static_cast<size_t>(x.k / 16),
          nb};
}

// ---- Per-ISA kernels, for matmul_quantized ------------------------------------------------------
// Computes columns 16*tile .. 16*tile+15 (clipped to n) of all m rows:
// out[r * ldo + c] = sum over blocks b, ascending, of the block's contribution (quant_matmul.cpp
// spells out the float operations, which every ISA must reproduce).
// `layout` is tile_layout(w.type(), w.cols()), computed once per call by the caller rather than
// once per tile (a division and a few lookups against a tile of ~7 KB).
using QuantTileFn = void (*)(const QuantizedActs& x, const QuantizedWeight& w,
                             const TileLayout& layout, float* out, int ldo, int tile);
void quant_tile_portable(const QuantizedActs& x, const QuantizedWeight& w, const TileLayout& layout,
                         float* out, int ldo, int tile);
// The kernel matmul_quantized runs for `isa`: the ISA's kernel for the type where there is one,
// else, on AVX-512, the AVX2 one (AVX-512 without VNNI has no Q8_0 kernel; every SIMD kernel
// gives the portable kernel's bits, so the choice never changes a result), else the portable
// kernel. The VNNI flags are the CPU's (cpu_has_avx512_vnni, cpu_has_avx_vnni) unless given.
QuantTileFn quant_tile_fn(QuantType type, Isa isa);
QuantTileFn quant_tile_fn(QuantType type, Isa isa, bool avx512_vnni, bool avx_vnni);
// AVX-512 kernels (quant_matmul_avx512.cpp): with VNNI's vpdpbusd, or with vpmaddubsw +
// vpmaddwd (all types but Q8_0, whose quants reach 255); nullptr where there is none. Only for
// CPUs with isa_supported(Isa::kAvx512) and, for vnni, cpu_has_avx512_vnni().
bool cpu_has_avx512_vnni();
QuantTileFn quant_tile_avx512(QuantType type, bool vnni);
// AVX2 kernels (quant_matmul_avx2.cpp), every type: with AVX-VNNI's ymm vpdpbusd, or with
// vpmaddubsw + vpmaddwd (Q8_0 on its signed quants). Only for CPUs with isa_supported(Isa::kAvx2)
// and, for vnni, cpu_has_avx_vnni().
bool cpu_has_avx_vnni();
QuantTileFn quant_tile_avx2(QuantType type, bool vnni);

}  // namespace pagedserve::kernels::detail
