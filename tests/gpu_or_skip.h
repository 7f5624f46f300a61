#pragma once
// The GPU of the CUDA test cases. Where the build or the machine has none, a case prints
// why and returns: ctest then reports it as skipped (SKIP_REGULAR_EXPRESSION in
// tests/CMakeLists.txt), not as passed. The cases compile in every build, so a CPU-only
// build still checks that they build.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "kernels/backend.h"
#ifdef FLASHSPEC_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace flashspec::testing {

// A CUDA backend on the first device, or null after the skip line.
inline std::unique_ptr<Backend> gpu_or_skip() {
  std::string why = "this build has no CUDA backend";
#ifdef FLASHSPEC_HAVE_CUDA
  if (cuda::device_count(why) > 0) return cuda::make_backend(0);
#endif
  MESSAGE((std::string("CUDA tests skipped: ") + why));
  return nullptr;
}

}  // namespace flashspec::testing
