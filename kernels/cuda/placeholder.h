// Host launcher of the placeholder kernel: keeps the CUDA target (ps_cuda_kernels) compiling
// for sm_80 and sm_90 until the real kernels land, so toolchain breakage shows up early.
#pragma once

#include <cuda_runtime_api.h>

namespace pagedserve::kernels::cuda {

// Launches an empty kernel (one thread) on `stream` and returns the launch status.
cudaError_t launch_placeholder(cudaStream_t stream = nullptr);

}  // namespace pagedserve::kernels::cuda
