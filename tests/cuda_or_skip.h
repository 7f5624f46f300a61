#pragma once
// The CUDA tests' backend: one on device 0, or null after the message that makes ctest
// report the case as skipped (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt) where the
// machine has no usable GPU. Include only under FLASHSPEC_HAVE_CUDA.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "kernels/cuda/cuda_backend.h"

namespace flashspec::testing {

inline std::unique_ptr<Backend> gpu_or_skip() {
  std::string why;
  if (cuda::device_count(why) == 0) {
    MESSAGE((std::string("CUDA tests skipped: ") + why));
    return nullptr;
  }
  return cuda::make_backend(0);
}

}  // namespace flashspec::testing
