// LinearWeight and EmbeddingTable: building the kernels' weights from checkpoint views.
#include "model/linear_weight.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "model/loader/model_error.h"

namespace pagedserve::model {

namespace {

kernels::WeightDtype packed_dtype(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return kernels::WeightDtype::kF16;
    case DType::BF16:
      return kernels::WeightDtype::kBF16;
    default:
      return kernels::WeightDtype::kF32;
  }
}

int view_rows(const TensorView& view) { return static_cast<int>(view.shape[0]); }
int view_cols(const TensorView& view) { return static_cast<int>(view.shape[1]); }

// Float parts stacked by rows in one dtype: their own when they share it, else float32.
kernels::PackedWeight pack_float_parts(std::initializer_list<const TensorView*> parts, int rows,
                                       int cols) {
  const TensorView& first = **parts.begin();
  const bool same_dtype = std::all_of(parts.begin(), parts.end(), [&](const TensorView* part) {
    return part->dtype == first.dtype && !is_quantized(part->dtype);
  });
  if (parts.size() == 1 && same_dtype) {
    return kernels::PackedWeight::pack(first.data, packed_dtype(first.dtype), rows, cols);
  }
  if (!same_dtype) {
    std::vector<float> stacked;
    for (const TensorView* part : parts) {
      const std::vector<float> values = to_f32(*part);
      stacked.insert(stacked.end(), values.begin(), values.end());
    }
    return kernels::PackedWeight::pack(stacked.data(), kernels::WeightDtype::kF32, rows, cols);
  }
  std::vector<std::byte> stacked;
  for (const TensorView* part : parts)
    stacked.insert(stacked.end(), part->data, part->data + part->num_bytes);
  return kernels::PackedWeight::pack(stacked.data(), packed_dtype(first.dtype), rows, cols);
}

// One part as a quantized weight: kept as stored when the checkpoint quantized it, else
// quantized to `type`.
kernels::QuantizedWeight quantized_part(const TensorView& part,
                                        std::optional<kernels::QuantType> type) {
  if (const std::optional<kernels::QuantType> stored = quant_type_of(part.dtype)) {
    return kernels::QuantizedWeight::pack(part.data, *stored, view_rows(part), view_cols(part));
  }
  // A row at a time (on the packing threads), not a float copy of the whole matrix.
  return kernels::QuantizedWeight::quantize_rows(
      [&part](int row, float* out) { to_f32_rows(part, row, 1, out); }, *type, view_rows(part),
      view_cols(part));
}

}  // namespace

std::optional<kernels::QuantType> quantization_for_width(kernels::QuantType wanted, int k) {
  using kernels::QuantType;
  if (k % kernels::quant_block_elements(wanted) == 0) return wanted;
  switch (wanted) {
    case QuantType::kQ4_K:
      wanted = QuantType::kQ5_0;
      break;
    case QuantType::kQ5_K:
      wanted = QuantType::kQ5_1;
      break;
    case QuantType::kQ6_K:
      wanted = QuantType::kQ8_0;
      break;
    default:
      break;
  }
  if (k % kernels::quant_block_elements(wanted) == 0) return wanted;
  return std::nullopt;
}

LinearWeight::LinearWeight(kernels::PackedWeight packed)
    : packed_(std::move(packed)), rows_(packed_.rows()), cols_(packed_.cols()) {}

LinearWeight LinearWeight::from_views(std::initializer_list<const TensorView*> parts,
                                      const WeightFormat& format) {
  assert(parts.size() > 0);
  LinearWeight weight;
  weight.cols_ = view_cols(**parts.begin());
  for (const TensorView* part : parts) weight.rows_ += view_rows(*part);

  const std::optional<kernels::QuantType> online =
      format.quantization ? quantization_for_width(*format.quantization, weight.cols_)
                          : std::nullopt;
  const auto will_be_quantized = [&](const TensorView* part) {
    return is_quantized(part->dtype) || online.has_value();
  };
  const bool all_quantized = std::all_of(parts.begin(), parts.end(), will_be_quantized);
  if (!all_quantized) {  // all float (or a rare float/quantized mix: widened)
    weight.packed_ = pack_float_parts(parts, weight.rows_, weight.cols_);
    return weight;
  }
  for (const TensorView* part : parts) weight.quantized_.push_back(quantized_part(*part, online));
  return weight;
}

size_t LinearWeight::weight_bytes() const {
  if (quantized_.empty()) return packed_.weight_bytes();
  size_t bytes = 0;
  for (const kernels::QuantizedWeight& part : quantized_) bytes += part.weight_bytes();
  return bytes;
}

std::vector<std::string> LinearWeight::format_names() const {
  if (quantized_.empty()) {
    switch (packed_.dtype()) {
      case kernels::WeightDtype::kF16:
        return {"F16"};
      case kernels::WeightDtype::kBF16:
        return {"BF16"};
      case kernels::WeightDtype::kF32:
        break;
    }
    return {"F32"};
  }
  std::vector<std::string> names;
  for (const kernels::QuantizedWeight& part : quantized_) {
    std::string type = kernels::quant_type_name(part.type());
    if (std::find(names.begin(), names.end(), type) == names.end()) names.push_back(type);
  }
  return names;
}

void LinearWeight::forward(const float* x, float* out, int m, kernels::ThreadPool* pool,
                           kernels::Isa isa, float* chunk_max) const {
  assert(chunk_max == nullptr || chunk_width() > 0);
  if (quantized_.empty()) {
    kernels::matmul_packed(x, packed_, out, m, pool, isa, chunk_max);
    return;
  }
  // The parts sit side by side in row order: one stacked call (x quantized once, one split of
  // all their tiles across the pool) gives the bits of one call per part.
  kernels::matmul_quantized_stacked(x, quantized_, out, m, rows_, pool, isa, chunk_max);
}

int64_t LinearWeight::chunk_width() const {
  if (quantized_.empty()) return kernels::PackedWeight::kTileRows;
  return quantized_.size() == 1 ? kernels::kQuantChunkColumns : 0;
}

EmbeddingTable::EmbeddingTable(std::vector<float> values, int hidden)
    : floats_(std::move(values)), hidden_(hidden) {}

EmbeddingTable EmbeddingTable::from_view(const TensorView& view) {
  const int hidden = view_cols(view);
  if (const std::optional<kernels::QuantType> type = quant_type_of(view.dtype)) {
    EmbeddingTable table;
    table.quantized_ = kernels::QuantizedWeight::pack(view.data, *type, view_rows(view), hidden);
    table.is_quantized_ = true;
    table.hidden_ = hidden;
    return table;
  }
  return EmbeddingTable(to_f32(view), hidden);
}

void EmbeddingTable::row(int id, float* out) const {
  if (is_quantized_) {
    quantized_.dequantize_row_to(id, out);
    return;
  }
  std::copy_n(floats_.begin() + static_cast<size_t>(id) * hidden_, hidden_, out);
}

}  // namespace pagedserve::model
