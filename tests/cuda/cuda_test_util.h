// Helpers for the GPU tests: skip when no device is visible, RAII device arrays, and host-side
// rounding to the storage dtypes (so a CPU reference can see exactly the values a kernel reads).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/cuda/cuda_executor.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pagedserve::cuda_testing {

using kernels::cuda::DType;

// Every GPU test starts with this: it reports SKIPPED with the reason on machines without one.
#define PAGEDSERVE_REQUIRE_GPU()                                                       \
  do {                                                                                 \
    if (::pagedserve::actors::cuda_device_count() == 0) {                              \
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount): GPU test not run"; \
    }                                                                                  \
  } while (0)

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    check(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    check(cudaDeviceSynchronize(), "kernel");
    check(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

// The float a kernel reads back after storing x in `dtype` (fp8 with scale 1).
inline float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::kFloat32:
      return x;
    case DType::kFloat16:
      return __half2float(__float2half_rn(x));
    case DType::kBFloat16:
      return __bfloat162float(__float2bfloat16_rn(x));
    case DType::kFp8E4M3:
      return static_cast<float>(__nv_fp8_e4m3(x));
  }
  return x;
}

// Raw storage bytes of `values` in `dtype` -> floats.
inline std::vector<float> decode(DType dtype, const std::vector<uint8_t>& raw) {
  const size_t size = kernels::cuda::dtype_size(dtype);
  std::vector<float> out(raw.size() / size);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = raw.data() + i * size;
    switch (dtype) {
      case DType::kFloat32:
        std::memcpy(&out[i], p, 4);
        break;
      case DType::kFloat16: {
        __half h;
        std::memcpy(&h, p, 2);
        out[i] = __half2float(h);
        break;
      }
      case DType::kBFloat16: {
        __nv_bfloat16 b;
        std::memcpy(&b, p, 2);
        out[i] = __bfloat162float(b);
        break;
      }
      case DType::kFp8E4M3: {
        __nv_fp8_e4m3 f;
        std::memcpy(&f, p, 1);
        out[i] = static_cast<float>(f);
        break;
      }
    }
  }
  return out;
}

// floats -> raw storage bytes in `dtype` (round to nearest; fp8 saturating, scale 1).
inline std::vector<uint8_t> encode(DType dtype, const std::vector<float>& values) {
  const size_t size = kernels::cuda::dtype_size(dtype);
  std::vector<uint8_t> raw(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = raw.data() + i * size;
    switch (dtype) {
      case DType::kFloat32:
        std::memcpy(p, &values[i], 4);
        break;
      case DType::kFloat16: {
        const __half h = __float2half_rn(values[i]);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBFloat16: {
        const __nv_bfloat16 b = __float2bfloat16_rn(values[i]);
        std::memcpy(p, &b, 2);
        break;
      }
      case DType::kFp8E4M3: {
        const __nv_fp8_e4m3 f(values[i]);
        std::memcpy(p, &f, 1);
        break;
      }
    }
  }
  return raw;
}

}  // namespace pagedserve::cuda_testing
