#pragma once
// The CUDA backend lives in a plugin, libflashspec-cuda.so beside the executable, loaded
// only when --backend cuda is asked. Linked in, the CUDA runtime's static initialisers
// ran before main in every process and crashed it under a small address-space limit
// (`ulimit -v`), even for `--help`; a CPU run should not pay for a GPU it does not use.
#include <memory>
#include <span>
#include <string>

#include "kernels/backend.h"

namespace flashspec {

using CudaPluginEntry = Backend* (*)(int device, std::string* error);

// A CUDA backend on `device`; the first one a process makes says on stderr which ops it
// runs through the host. Error "--backend cuda: ..." when this build has no CUDA
// backend, the plugin cannot be loaded, or there is no usable GPU.
std::unique_ptr<Backend> load_cuda_backend(int device);

// The ops the CUDA backend runs through the host (Backend::host_fallback_ops), known
// without loading it or a GPU: a fact of the build, kCudaHostFallbackOps.
std::span<const HostFallbackOp> cuda_host_fallback_ops();

}  // namespace flashspec
