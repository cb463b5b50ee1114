// QuantizedWeight (the packed tile layout of quant_kernels.h), the quantization of activation
// rows, the portable tile kernel and the dispatch of matmul_quantized.
//
// The numerics every ISA reproduces bit for bit. For output (r, c) acc starts at 0.0f and, for
// each block b in increasing order, with ad = the activation block's d, wd = f16 d and wm = f16
// m/dmin of the weight block, u the unsigned weight quants, a the activation quants and s the
// activation sums over 16 values, all integer sums exact in int32:
//   Q8_0, Q4_0, Q5_0: i = sum u*a - offset * sum a;        acc = fma(wd * ad, float(i), acc)
//   Q5_1:             i = sum u*a;                          acc = fma(wd * ad, float(i), acc)
//                                                           acc = fma(wm * ad, float(sum a), acc)
//   Q4_K, Q5_K:       i = sum_j sc_j * (sum_{32 in j} u*a); acc = fma(wd * ad, float(i), acc)
//                     n = sum_j mn_j * (sum_{32 in j} a);   acc = fma(-(wm * ad), float(n), acc)
//   Q6_K:             i = sum_j sc_j * (sum_{16 in j} u*a - 32 * sum_{16 in j} a)
//                                                           acc = fma(wd * ad, float(i), acc)
// (float(i) rounds to nearest even, as vcvtdq2ps does; j runs over sub-blocks.)
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/kv_dtype.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/sampling_rows.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {

namespace detail {

namespace {

constexpr size_t kAlignment = 64;  // as AlignedFree frees it (packed_matmul.cpp)

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

// Byte of vector g (of a 32-value chunk) that holds u[column col][4g + i].
size_t vector_byte(int g, int col, int i) { return static_cast<size_t>(g * 64 + col * 4 + i); }

void pack_chunk(QuantType type, const uint8_t* u, int col, std::byte* p) {
  const int bits = bits_of(type);
  for (int i = 0; i < 4; ++i) {
    if (bits == 5) {
      unsigned hi = 0;
      for (int g = 0; g < 8; ++g) hi |= ((u[4 * g + i] >> 4) & 1u) << g;
      p[col * 4 + i] = static_cast<std::byte>(hi);
    } else if (bits == 6) {
      for (int h = 0; h < 2; ++h) {
        unsigned hi = 0;
        for (int j = 0; j < 4; ++j) hi |= ((u[4 * (4 * h + j) + i] >> 4) & 3u) << (2 * j);
        p[vector_byte(h, col, i)] = static_cast<std::byte>(hi);
      }
    }
  }
  p += high_bytes(type);
  for (int i = 0; i < 4; ++i) {
    if (bits == 8) {
      for (int g = 0; g < 8; ++g) p[vector_byte(g, col, i)] = static_cast<std::byte>(u[4 * g + i]);
    } else {
      for (int v = 0; v < 4; ++v) {
        const unsigned lo = u[4 * v + i] & 0xfu;
        const unsigned hi = u[4 * (v + 4) + i] & 0xfu;
        p[vector_byte(v, col, i)] = static_cast<std::byte>(lo | (hi << 4));
      }
    }
  }
}

void unpack_chunk(QuantType type, const std::byte* p, int col, uint8_t* u) {
  const int bits = bits_of(type);
  const std::byte* low = p + high_bytes(type);
  for (int i = 0; i < 4; ++i) {
    for (int g = 0; g < 8; ++g) {
      unsigned value;
      if (bits == 8) {
        value = std::to_integer<unsigned>(low[vector_byte(g, col, i)]);
      } else {
        value = std::to_integer<unsigned>(low[vector_byte(g % 4, col, i)]) >> (g < 4 ? 0 : 4);
        value &= 0xfu;
      }
      if (bits == 5) value |= ((std::to_integer<unsigned>(p[col * 4 + i]) >> g) & 1u) << 4;
      if (bits == 6) {
        const unsigned hi = std::to_integer<unsigned>(p[vector_byte(g / 4, col, i)]);
        value |= ((hi >> (2 * (g % 4))) & 3u) << 4;
      }
      u[4 * g + i] = static_cast<uint8_t>(value);
    }
  }
}

}  // namespace

TileLayout tile_layout(QuantType type, int k) {
  TileLayout layout;
  const int elements = quant_block_elements(type);
  layout.blocks = k / elements;
  // Every group's scale line, the last group's too, however few blocks it holds.
  const int groups = (layout.blocks + tile_group_blocks(type) - 1) / tile_group_blocks(type);
  layout.tile_bytes = groups * kTileScaleLine + layout.blocks * tile_block_bytes(type);
  return layout;
}

void pack_tile_block(QuantType type, const DecodedBlock& block, int b, int col, std::byte* tile) {
  std::byte* scales = tile + tile_scale_offset(type, b);
  std::memcpy(scales + 2 * col, &block.d, 2);
  if (has_min(type)) std::memcpy(scales + 32 + 2 * col, &block.m, 2);
  std::byte* p = tile + tile_quant_offset(type, b);
  if (is_k(type)) {
    const bool q6 = type == QuantType::kQ6_K;
    for (int j = 0; j < (q6 ? 16 : 8); ++j) p[16 * j + col] = static_cast<std::byte>(block.sc[j]);
    if (!q6) {
      for (int j = 0; j < 8; ++j) p[128 + 16 * j + col] = static_cast<std::byte>(block.mn[j]);
    }
    p += 256;
  }
  for (int ch = 0; ch < quant_block_elements(type) / 32; ++ch) {
    pack_chunk(type, block.u + 32 * ch, col, p + ch * chunk_bytes(type));
  }
}

void unpack_tile_block(QuantType type, const std::byte* tile, int b, int col, DecodedBlock& out) {
  out = DecodedBlock{};
  const std::byte* scales = tile + tile_scale_offset(type, b);
  std::memcpy(&out.d, scales + 2 * col, 2);
  if (has_min(type)) std::memcpy(&out.m, scales + 32 + 2 * col, 2);
  const std::byte* p = tile + tile_quant_offset(type, b);
  if (is_k(type)) {
    const bool q6 = type == QuantType::kQ6_K;
    for (int j = 0; j < (q6 ? 16 : 8); ++j) out.sc[j] = std::to_integer<int8_t>(p[16 * j + col]);
    if (!q6) {
      for (int j = 0; j < 8; ++j) out.mn[j] = std::to_integer<uint8_t>(p[128 + 16 * j + col]);
    }
    p += 256;
  }
  for (int ch = 0; ch < quant_block_elements(type) / 32; ++ch) {
    unpack_chunk(type, p + ch * chunk_bytes(type), col, out.u + 32 * ch);
  }
}

// ---- Activations ------------------------------------------------------------------------------

size_t activation_scratch_bytes(int m, int k, int block) {
  const size_t rows = static_cast<size_t>(m);
  return round_up(rows * k, kAlignment) + round_up(rows * (k / block) * 4, kAlignment) +
         rows * (k / 16) * 4;
}

QuantizedActs activation_layout(int m, int k, int block, std::byte* scratch) {
  const size_t rows = static_cast<size_t>(m);
  auto* q = reinterpret_cast<int8_t*>(scratch);
  auto* d = reinterpret_cast<float*>(scratch + round_up(rows * k, kAlignment));
  auto* sums = reinterpret_cast<int32_t*>(reinterpret_cast<std::byte*>(d) +
                                          round_up(rows * (k / block) * 4, kAlignment));
  return {m, k, block, q, d, sums};
}

QuantizedActs quantize_activations(const float* x, int m, int k, int block, std::byte* scratch) {
  const QuantizedActs acts = activation_layout(m, k, block, scratch);
  const size_t rows = static_cast<size_t>(m);
  auto* q = const_cast<int8_t*>(acts.q);
  auto* d = const_cast<float*>(acts.d);
  auto* sums = const_cast<int32_t*>(acts.sums);
  const int nb = k / block;
  for (size_t r = 0; r < rows; ++r) {
    for (int b = 0; b < nb; ++b) {
      const size_t base = r * k + static_cast<size_t>(b) * block;
      float amax = 0.0f;
      for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[base + i]));
      if (!(amax >= kMinActivationAmax)) amax = 0.0f;
      d[r * nb + b] = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int i = 0; i < block; ++i) {
        q[base + i] = static_cast<int8_t>(std::nearbyint(x[base + i] * id));
      }
    }
    for (int j = 0; j < k / 16; ++j) {
      int32_t s = 0;
      for (int i = 0; i < 16; ++i) s += q[r * k + 16 * j + i];
      sums[r * (k / 16) + j] = s;
    }
  }
  return acts;
}

// ---- The portable kernel ------------------------------------------------------------------------

namespace {

int32_t dot(const uint8_t* u, const int8_t* a, int count) {
  int32_t s = 0;
  for (int i = 0; i < count; ++i) s += static_cast<int32_t>(u[i]) * a[i];
  return s;
}

// One weight block against one activation block: the contract in the header comment.
float block_update(QuantType type, const DecodedBlock& w, float wd, float wm, const int8_t* a,
                   float ad, const int32_t* s16, float acc) {
  switch (type) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
    case QuantType::kQ5_0: {
      const int32_t i = dot(w.u, a, 32) - offset_of(type) * (s16[0] + s16[1]);
      return std::fma(wd * ad, static_cast<float>(i), acc);
    }
    case QuantType::kQ5_1:
      acc = std::fma(wd * ad, static_cast<float>(dot(w.u, a, 32)), acc);
      return std::fma(wm * ad, static_cast<float>(s16[0] + s16[1]), acc);
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      int32_t i = 0;
      int32_t n = 0;
      for (int j = 0; j < 8; ++j) {
        i += w.sc[j] * dot(w.u + 32 * j, a + 32 * j, 32);
        n += w.mn[j] * (s16[2 * j] + s16[2 * j + 1]);
      }
      acc = std::fma(wd * ad, static_cast<float>(i), acc);
      return std::fma(-(wm * ad), static_cast<float>(n), acc);
    }
    case QuantType::kQ6_K: {
      int32_t i = 0;
      for (int j = 0; j < 16; ++j) i += w.sc[j] * (dot(w.u + 16 * j, a + 16 * j, 16) - 32 * s16[j]);
      return std::fma(wd * ad, static_cast<float>(i), acc);
    }
  }
  return acc;
}

}  // namespace

void quant_tile_portable(const QuantizedActs& x, const QuantizedWeight& w, const TileLayout& layout,
                         float* out, int ldo, int tile) {
  constexpr int kRows = 8;  // rows per pass over the tile's blocks
  const QuantType type = w.type();
  const std::byte* base = w.data() + tile * layout.tile_bytes;
  const int cols = std::min(kTileCols, w.rows() - tile * kTileCols);
  const int elements = quant_block_elements(type);
  DecodedBlock blocks[kTileCols];
  float wd[kTileCols];
  float wm[kTileCols];
  for (int r0 = 0; r0 < x.m; r0 += kRows) {
    const int rows = std::min(kRows, x.m - r0);
    float acc[kRows][kTileCols] = {};
    for (int b = 0; b < layout.blocks; ++b) {
      for (int c = 0; c < cols; ++c) {
        unpack_tile_block(type, base, b, c, blocks[c]);
        wd[c] = f16_to_f32(blocks[c].d);
        wm[c] = f16_to_f32(blocks[c].m);
      }
      for (int r = 0; r < rows; ++r) {
        const size_t row = static_cast<size_t>(r0 + r);
        const int8_t* a = x.q + row * x.k + static_cast<size_t>(b) * elements;
        const float ad = x.d[row * layout.blocks + b];
        const int32_t* s16 = x.sums + row * (x.k / 16) + static_cast<size_t>(b) * (elements / 16);
        for (int c = 0; c < cols; ++c) {
          acc[r][c] = block_update(type, blocks[c], wd[c], wm[c], a, ad, s16, acc[r][c]);
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      std::copy(acc[r], acc[r] + cols, out + static_cast<size_t>(r0 + r) * ldo + tile * kTileCols);
    }
  }
}

QuantTileFn quant_tile_fn(QuantType type, Isa isa, bool avx512_vnni, bool avx_vnni) {
  QuantTileFn fn = nullptr;
  if (isa == Isa::kAvx512) fn = quant_tile_avx512(type, avx512_vnni);
  // An AVX-512 CPU without VNNI (Skylake-SP) ran Q8_0 on the portable loop before this.
  if (fn == nullptr && (isa == Isa::kAvx512 || isa == Isa::kAvx2)) {
    fn = quant_tile_avx2(type, avx_vnni);
  }
  return fn != nullptr ? fn : quant_tile_portable;
}

QuantTileFn quant_tile_fn(QuantType type, Isa isa) {
  return quant_tile_fn(type, isa, cpu_has_avx512_vnni(), cpu_has_avx_vnni());
}

}  // namespace detail

// ---- QuantizedWeight ----------------------------------------------------------------------------

namespace {

// Storage for the tiles, not yet written (pack_rows zeroes each tile before filling it, so the
// threads that pack a range also take its first-touch page faults).
std::unique_ptr<std::byte, AlignedFree> allocate_tiles(QuantType type, int n, int k,
                                                       size_t& bytes) {
  const size_t tiles = static_cast<size_t>((n + detail::kTileCols - 1) / detail::kTileCols);
  bytes = std::max<size_t>(64, tiles * detail::tile_layout(type, k).tile_bytes);
  std::unique_ptr<std::byte, AlignedFree> storage(
      static_cast<std::byte*>(allocate_huge_aligned(bytes, detail::kAlignment)),
      AlignedFree{bytes});
  if (tiles == 0) std::memset(storage.get(), 0, bytes);
  return storage;
}

// Row `row` of the weight, in ggml's layout, into its tile column.
void pack_row(QuantType type, int k, const std::byte* src, int row, std::byte* storage) {
  const detail::TileLayout layout = detail::tile_layout(type, k);
  std::byte* tile = storage + (row / detail::kTileCols) * layout.tile_bytes;
  detail::DecodedBlock block;
  for (int b = 0; b < layout.blocks; ++b) {
    detail::decode_block(type, src + b * quant_block_bytes(type), block);
    detail::pack_tile_block(type, block, b, row % detail::kTileCols, tile);
  }
}

// Packs every row of an [n, k] weight: row_src(row, bytes, floats) gives the row in ggml's
// layout (bytes: quant_row_bytes, floats: k of room for a row it must make). Loading is
// single-threaded otherwise, and packing a 1B model's weights took ~5 s of it, so large weights
// are packed by up to hardware_concurrency() threads, each a contiguous range of tiles (it
// zeroes them first: padding columns stay zero). The bytes do not depend on the split.
template <typename RowSource>
void pack_rows(QuantType type, int n, int k, std::byte* storage, const RowSource& row_src) {
  const detail::TileLayout layout = detail::tile_layout(type, k);
  const int tiles = (n + detail::kTileCols - 1) / detail::kTileCols;
  const auto pack_range = [&](int t0, int t1) {
    std::memset(storage + t0 * layout.tile_bytes, 0, (t1 - t0) * layout.tile_bytes);
    std::vector<std::byte> bytes(quant_row_bytes(type, k));
    std::vector<float> floats(k);
    for (int row = t0 * detail::kTileCols; row < std::min(n, t1 * detail::kTileCols); ++row) {
      pack_row(type, k, row_src(row, bytes.data(), floats.data()), row, storage);
    }
  };
  constexpr size_t kMinBytesPerThread = size_t{8} << 20;
  const size_t total = static_cast<size_t>(tiles) * layout.tile_bytes;
  const int threads = static_cast<int>(std::clamp<size_t>(
      total / kMinBytesPerThread, 1, std::max(1u, std::thread::hardware_concurrency())));
  if (threads <= 1) return pack_range(0, tiles);
  // A row source may throw (a malformed tensor): each thread keeps its error for the caller.
  std::vector<std::exception_ptr> errors(threads);
  const auto run_share = [&](int i) {
    try {
      pack_range(static_cast<int>(int64_t{tiles} * i / threads),
                 static_cast<int>(int64_t{tiles} * (i + 1) / threads));
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  for (int i = 1; i < threads; ++i) workers.emplace_back(run_share, i);
  run_share(0);
  for (std::thread& worker : workers) worker.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace

QuantizedWeight QuantizedWeight::with_storage(QuantType type, int n, int k) {
  assert(n >= 0 && k >= 0 && k % quant_block_elements(type) == 0);
  QuantizedWeight packed;
  packed.storage_ = allocate_tiles(type, n, k, packed.storage_bytes_);
  packed.data_ = packed.storage_.get();
  packed.n_ = n;
  packed.k_ = k;
  packed.type_ = type;
  return packed;
}

QuantizedWeight QuantizedWeight::pack(const void* w, QuantType type, int n, int k) {
  QuantizedWeight packed = with_storage(type, n, k);
  const auto* src = static_cast<const std::byte*>(w);
  const size_t row_bytes = quant_row_bytes(type, k);
  pack_rows(type, n, k, packed.storage_.get(),
            [&](int row, std::byte*, float*) { return src + row * row_bytes; });
  return packed;
}

QuantizedWeight QuantizedWeight::quantize(const float* w, QuantType type, int n, int k) {
  QuantizedWeight packed = with_storage(type, n, k);
  pack_rows(type, n, k, packed.storage_.get(), [&](int row, std::byte* bytes, float*) {
    quantize_row(type, w + static_cast<size_t>(row) * k, bytes, k);
    return static_cast<const std::byte*>(bytes);
  });
  return packed;
}

QuantizedWeight QuantizedWeight::quantize_rows(const RowFn& row_fn, QuantType type, int n, int k) {
  QuantizedWeight packed = with_storage(type, n, k);
  pack_rows(type, n, k, packed.storage_.get(), [&](int row, std::byte* bytes, float* floats) {
    row_fn(row, floats);
    quantize_row(type, floats, bytes, k);
    return static_cast<const std::byte*>(bytes);
  });
  return packed;
}

void QuantizedWeight::dequantize_row_to(int row, float* out) const {
  assert(row >= 0 && row < n_);
  const detail::TileLayout layout = detail::tile_layout(type_, k_);
  const std::byte* tile = data_ + (row / detail::kTileCols) * layout.tile_bytes;
  const int elements = quant_block_elements(type_);
  detail::DecodedBlock block;
  for (int b = 0; b < layout.blocks; ++b) {
    detail::unpack_tile_block(type_, tile, b, row % detail::kTileCols, block);
    detail::dequantize_decoded(type_, block, out + static_cast<size_t>(b) * elements);
  }
}

namespace {

// x's rows quantized for blocks of `block`, into the calling thread's scratch for slot `slot`
// (reused across calls; workers only read it).
detail::QuantizedActs quantize_into_scratch(const float* x, int m, int k, int block, Isa isa,
                                            int slot) {
  thread_local std::vector<std::byte> scratch[2];
  std::vector<std::byte>& buffer = scratch[slot];
  const size_t bytes = detail::activation_scratch_bytes(m, k, block) + detail::kAlignment;
  if (buffer.size() < bytes) buffer.resize(bytes);
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  std::byte* aligned = buffer.data() + (detail::round_up(address, detail::kAlignment) - address);
  return isa == Isa::kAvx512 ? detail::quantize_activations_avx512(x, m, k, block, aligned)
         : isa == Isa::kAvx2 ? detail::quantize_activations_avx2(x, m, k, block, aligned)
                             : detail::quantize_activations(x, m, k, block, aligned);
}

}  // namespace

void matmul_quantized(const float* x, const QuantizedWeight& w, float* out, int m, int ldo,
                      ThreadPool* pool, Isa isa) {
  // Nothing is read or written when m or n is 0, so x and out may then be null.
  assert(m >= 0 && ldo >= w.rows() &&
         (m == 0 || w.rows() == 0 || (x != nullptr && out != nullptr)));
  if (m == 0 || w.rows() == 0) return;
  matmul_quantized_stacked(x, std::span(&w, 1), out, m, ldo, pool, isa);
}

void matmul_quantized_stacked(const float* x, std::span<const QuantizedWeight> ws, float* out,
                              int m, int ldo, ThreadPool* pool, Isa isa, float* chunk_max) {
  static_assert(kQuantChunkColumns == detail::kTileCols);
  assert(m >= 0 && (m == 0 || (x != nullptr && out != nullptr)));
  assert(isa_supported(isa));
  const int count = static_cast<int>(ws.size());
  assert(chunk_max == nullptr || count == 1);
  if (m == 0 || count == 0) return;
  const int k = ws[0].cols();
  // One quantization of x per block size the weights use (32 and 256 at most).
  detail::QuantizedActs acts[2];
  bool quantized[2] = {false, false};
  struct Run {
    const QuantizedWeight* w;
    const detail::QuantizedActs* acts;
    detail::QuantTileFn tile_fn;
    detail::TileLayout layout;
    float* out;
    int64_t first_tile;  // in the stack's tile numbering
  };
  constexpr int kInlineRuns = 8;
  Run inline_runs[kInlineRuns];
  std::vector<Run> heap_runs;
  Run* runs = inline_runs;
  if (count > kInlineRuns) {
    heap_runs.resize(static_cast<size_t>(count));
    runs = heap_runs.data();
  }
  int64_t tiles = 0;
  int rows = 0;
  for (int i = 0; i < count; ++i) {
    const QuantizedWeight& w = ws[i];
    assert(w.cols() == k);
    const int block = quant_block_elements(w.type());
    const int slot = block == 32 ? 0 : 1;
    if (!quantized[slot]) {
      acts[slot] = quantize_into_scratch(x, m, k, block, isa, slot);
      quantized[slot] = true;
    }
    runs[i] = {&w,
               &acts[slot],
               detail::quant_tile_fn(w.type(), isa),
               detail::tile_layout(w.type(), k),
               out + rows,
               tiles};
    tiles += (w.rows() + detail::kTileCols - 1) / detail::kTileCols;
    rows += w.rows();
  }
  assert(ldo >= rows);
  parallel_for_contiguous(pool, tiles, 2.0 * m * rows * k, [&](int64_t tile) {
    int i = 0;
    while (i + 1 < count && tile >= runs[i + 1].first_tile) ++i;
    const Run& run = runs[i];
    run.tile_fn(*run.acts, *run.w, run.layout, run.out, ldo,
                static_cast<int>(tile - run.first_tile));
    if (chunk_max == nullptr) return;  // one weight: the stack's tiles are its own
    const int64_t first = tile * detail::kTileCols;
    tile_chunk_maxima(out, ldo, m, first, std::min<int64_t>(detail::kTileCols, rows - first),
                      chunk_max + tile, tiles, isa);
  });
}

}  // namespace pagedserve::kernels
