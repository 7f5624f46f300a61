#pragma once
// CUDA runtime errors as flashspec::Error: one line naming what failed and why.
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace flashspec::cuda {

inline void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error("cuda: " + what + ": " + cudaGetErrorString(e));
}

// After a kernel launch: a bad configuration is reported here, a fault in the kernel at
// the next synchronising call (download, synchronize).
inline void check_launch(const char* kernel) { check(cudaGetLastError(), std::string("launch ") + kernel); }

}  // namespace flashspec::cuda
