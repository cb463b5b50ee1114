// LinearWeight: one linear layer's weight [n, k] (n output features, Hugging Face's Linear
// layout) as the CPU kernels hold it, whatever the checkpoint stored: float32/F16/BF16 packed
// for matmul_packed, or llama.cpp's block-quantized types kept quantized for matmul_quantized.
// A stacked projection (q, k and v; gate and up) may mix types, as every Q4_K_M file does (v in
// Q6_K beside q and k in Q4_K): each run of one quantized type is its own weight, and the runs
// write side by side into one output row.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/quant.h"
#include "model/loader/safetensors.h"

namespace pagedserve::model {

// How weights are held in memory: as stored, or (online quantization, as vLLM's) float weights
// quantized at load to `quantization`.
struct WeightFormat {
  std::optional<kernels::QuantType> quantization;
};

// The type a float matrix of width k is quantized to when `wanted` is asked for: wanted when k
// fills its blocks, else llama.cpp's fallback (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), and
// nullopt (keep it float) when k is not a multiple of 32 either.
std::optional<kernels::QuantType> quantization_for_width(kernels::QuantType wanted, int k);

class LinearWeight {
 public:
  LinearWeight() = default;
  explicit LinearWeight(kernels::PackedWeight packed);
  // Stacks `parts` (matrices of equal width, by rows) from checkpoint views: float parts stay
  // in their dtype (or are quantized per `format`), quantized parts stay as they are. A stack
  // mixing float and quantized parts (legal, unusual) is widened to float32.
  static LinearWeight from_views(std::initializer_list<const TensorView*> parts,
                                 const WeightFormat& format = {});

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  // Bytes one pass over the weight reads, at their stored (quantized) size.
  size_t weight_bytes() const;
  // The dtypes held, in row order without repeats: {"Q4_K", "Q6_K"}, {"BF16"} (logs, benchmarks).
  std::vector<std::string> format_names() const;

  // out[r, :] = x[r, :] * w^T for r < m. x: [m, cols]; out: [m, rows]. Rows of out depend only
  // on their x row (the kernels' batch-invariance contract).
  // The columns per chunk whose maxima forward() can take: 64 for float weights
  // (matmul_packed), 16 for one quantized weight (matmul_quantized_stacked), else 0 (none).
  int64_t chunk_width() const;
  // chunk_max, when given (only where chunk_width() > 0): room for [m, ceil(rows /
  // chunk_width())], filled with the maxima of each out row's chunks.
  void forward(const float* x, float* out, int m, kernels::ThreadPool* pool, kernels::Isa isa,
               float* chunk_max = nullptr) const;

 private:
  kernels::PackedWeight packed_;                     // when every part is float
  std::vector<kernels::QuantizedWeight> quantized_;  // otherwise, one per part in row order
  int rows_ = 0;
  int cols_ = 0;
};

// A token-embedding table [vocab, hidden] whose rows are read one token at a time: float32, or
// kept quantized and dequantized per row (a 128k-vocabulary table in Q4_K is 1/7 of float32).
class EmbeddingTable {
 public:
  EmbeddingTable() = default;
  explicit EmbeddingTable(std::vector<float> values, int hidden);
  static EmbeddingTable from_view(const TensorView& view);

  int hidden() const { return hidden_; }
  // Writes row `id` ([hidden] floats) to out.
  void row(int id, float* out) const;

 private:
  std::vector<float> floats_;
  kernels::QuantizedWeight quantized_;
  bool is_quantized_ = false;
  int hidden_ = 0;
};

}  // namespace pagedserve::model
