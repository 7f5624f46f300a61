#pragma once
// The CUDA backend lives in a plugin, libflashspec-cuda.so beside the executable, loaded
// only when --backend cuda is asked. Linked in, the CUDA runtime's static initialisers
// ran before main in every process and crashed it under a small address-space limit
// (`ulimit -v`), even for `--help`; a CPU run should not pay for a GPU it does not use.
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace flashspec {

using CudaPluginEntry = Backend* (*)(int device, std::string* error);

// A CUDA backend on `device`. Error "--backend cuda: ..." when this build has no CUDA
// backend, the plugin cannot be loaded, or there is no usable GPU.
std::unique_ptr<Backend> load_cuda_backend(int device);

}  // namespace flashspec
