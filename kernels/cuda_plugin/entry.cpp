// The one symbol of libflashspec-cuda.so, the CUDA backend as a plugin (see
// kernels/cuda_loader.h for why it is one). Errors cross the boundary as text, not as
// exceptions: the plugin carries its own hidden copy of core/.
#include <exception>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda_loader.h"

extern "C" __attribute__((visibility("default"))) flashspec::Backend* flashspec_cuda_make_backend(int device,
                                                                                                  std::string* error) {
  try {
    return flashspec::cuda::make_backend(device).release();
  } catch (const std::exception& e) {
    *error = e.what();
  } catch (...) {
    *error = "--backend cuda: unknown failure";
  }
  return nullptr;
}

// The loader calls it through this type; a mismatch fails to compile here.
static_assert(std::is_same_v<decltype(&flashspec_cuda_make_backend), flashspec::CudaPluginEntry>);
