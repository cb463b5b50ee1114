// The placeholder CUDA translation unit: an empty kernel and its launcher, following the
// kernel-file shape the real kernels will use (device code, __global__ kernel, host launcher
// returning a status).
#include <cuda_runtime.h>

#include "kernels/cuda/placeholder.h"

namespace pagedserve::kernels::cuda {
namespace {

__global__ void placeholder_kernel() {}

}  // namespace

cudaError_t launch_placeholder(cudaStream_t stream) {
  placeholder_kernel<<<1, 1, 0, stream>>>();
  // A launch reports configuration errors only through cudaGetLastError.
  return cudaGetLastError();
}

}  // namespace pagedserve::kernels::cuda
