// Weight element types: names, sizes and the conversion of any tensor view to float32.
#include <bit>
#include <cstring>

#include "kernels/cpu/kv_dtype.h"
#include "kernels/cpu/quant.h"
#include "model/loader/model_error.h"
#include "model/loader/safetensors.h"
#include "model/loader/shape_string.h"

namespace pagedserve::model {

namespace {

uint16_t read_le_u16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) |
                               (std::to_integer<uint16_t>(p[1]) << 8));
}

}  // namespace

std::optional<kernels::QuantType> quant_type_of(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
      return kernels::QuantType::kQ8_0;
    case DType::Q4_0:
      return kernels::QuantType::kQ4_0;
    case DType::Q5_0:
      return kernels::QuantType::kQ5_0;
    case DType::Q5_1:
      return kernels::QuantType::kQ5_1;
    case DType::Q4_K:
      return kernels::QuantType::kQ4_K;
    case DType::Q5_K:
      return kernels::QuantType::kQ5_K;
    case DType::Q6_K:
      return kernels::QuantType::kQ6_K;
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      break;
  }
  return std::nullopt;
}

DType dtype_of(kernels::QuantType type) {
  switch (type) {
    case kernels::QuantType::kQ8_0:
      return DType::Q8_0;
    case kernels::QuantType::kQ4_0:
      return DType::Q4_0;
    case kernels::QuantType::kQ5_0:
      return DType::Q5_0;
    case kernels::QuantType::kQ5_1:
      return DType::Q5_1;
    case kernels::QuantType::kQ4_K:
      return DType::Q4_K;
    case kernels::QuantType::kQ5_K:
      return DType::Q5_K;
    case kernels::QuantType::kQ6_K:
      break;
  }
  return DType::Q6_K;
}

bool is_quantized(DType dtype) { return quant_type_of(dtype).has_value(); }

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "float32";
    case DType::BF16:
      return "bfloat16";
    default:
      return "float16";
  }
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    default:
      return kernels::quant_type_name(*quant_type_of(dtype));
  }
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    default:
      return 0;
  }
}

std::optional<uint64_t> tensor_bytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements)) {
      return std::nullopt;
    }
  }
  const std::optional<kernels::QuantType> quant = quant_type_of(dtype);
  uint64_t bytes = 0;
  if (!quant) {
    if (__builtin_mul_overflow(elements, dtype_size(dtype), &bytes)) return std::nullopt;
    return bytes;
  }
  const auto block = static_cast<uint64_t>(kernels::quant_block_elements(*quant));
  if (shape.empty() || shape.back() % static_cast<int64_t>(block) != 0) return std::nullopt;
  if (__builtin_mul_overflow(elements / block, kernels::quant_block_bytes(*quant), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

int64_t TensorView::num_elements() const {
  int64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(elements, dim, &elements)) {
      throw ModelError(file.string() + ": tensor " + name + " has invalid shape " +
                       detail::shape_string(shape));
    }
  }
  return elements;
}

namespace {

// Views normally come from a validated file, but the struct is public: re-check the size so
// a hand-built view cannot read past its buffer.
void check_view_bytes(const TensorView& tensor) {
  const std::optional<uint64_t> expected_bytes = tensor_bytes(tensor.dtype, tensor.shape);
  if (!expected_bytes || *expected_bytes != tensor.num_bytes ||
      (tensor.num_bytes > 0 && tensor.data == nullptr)) {
    throw ModelError(tensor.file.string() + ": tensor " + tensor.name + " has " +
                     std::to_string(tensor.num_bytes) + " bytes, which does not match shape " +
                     detail::shape_string(tensor.shape) + " of " + dtype_name(tensor.dtype));
  }
}

// Elements [first, first + count) as float32; for a quantized dtype, whole rows of `row`.
void convert_elements(const TensorView& tensor, uint64_t first, uint64_t count, int64_t row,
                      float* out) {
  const std::byte* src = tensor.data;
  if (const std::optional<kernels::QuantType> quant = quant_type_of(tensor.dtype)) {
    const size_t row_bytes = kernels::quant_row_bytes(*quant, row);
    for (uint64_t r = 0; row > 0 && r < count / static_cast<uint64_t>(row); ++r) {
      kernels::dequantize_row(*quant, src + (first / row + r) * row_bytes, out + r * row, row);
    }
    return;
  }
  switch (tensor.dtype) {
    case DType::F32:
      if constexpr (std::endian::native == std::endian::little) {
        if (count > 0) std::memcpy(out, src + 4 * first, 4 * count);
      } else {
        for (uint64_t i = 0; i < count; ++i) {
          uint32_t bits = 0;
          for (int b = 3; b >= 0; --b)
            bits = (bits << 8) | std::to_integer<uint32_t>(src[4 * (first + i) + b]);
          out[i] = std::bit_cast<float>(bits);
        }
      }
      break;
    case DType::F16:
      for (uint64_t i = 0; i < count; ++i) {
        out[i] = kernels::f16_to_f32(read_le_u16(src + 2 * (first + i)));
      }
      break;
    case DType::BF16:
      for (uint64_t i = 0; i < count; ++i) {
        out[i] = kernels::bf16_to_f32(read_le_u16(src + 2 * (first + i)));
      }
      break;
    default:
      break;
  }
}

int64_t row_length(const TensorView& tensor) {
  return tensor.shape.empty() ? 1 : tensor.shape.back();
}

}  // namespace

std::vector<float> to_f32(const TensorView& tensor) {
  check_view_bytes(tensor);
  const auto elements = static_cast<uint64_t>(tensor.num_elements());
  std::vector<float> out(static_cast<size_t>(elements));
  convert_elements(tensor, 0, elements, row_length(tensor), out.data());
  return out;
}

void to_f32_rows(const TensorView& tensor, int64_t first_row, int64_t rows, float* out) {
  check_view_bytes(tensor);
  const int64_t row = row_length(tensor);
  const int64_t total_rows = row > 0 ? tensor.num_elements() / row : 0;
  if (first_row < 0 || rows < 0 || first_row > total_rows || rows > total_rows - first_row) {
    throw ModelError(tensor.file.string() + ": tensor " + tensor.name + " has " +
                     std::to_string(total_rows) + " rows; rows " + std::to_string(first_row) +
                     ".." + std::to_string(first_row + rows) + " asked for");
  }
  convert_elements(tensor, static_cast<uint64_t>(first_row * row),
                   static_cast<uint64_t>(rows * row), row, out);
}

}  // namespace pagedserve::model
