#include "kernels/cuda_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <mutex>

#include "core/error.h"
#include "kernels/host_fallback.h"

namespace flashspec {

#ifdef FLASHSPEC_CUDA_PLUGIN
namespace {

// The directory of the running executable ("" when /proc is unavailable).
std::string executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  const std::string path(buf, size_t(n));
  return path.substr(0, path.rfind('/') + 1);
}

// Says once per process (the draft has a backend of its own) which ops have no CUDA
// kernel: a model that uses them runs, but slower than the GPU would.
void tell_host_fallbacks(const Backend& be) {
  static std::once_flag told;
  std::call_once(told, [&] {
    const std::span<const HostFallbackOp> ops = be.host_fallback_ops();
    if (ops.empty()) return;
    std::fprintf(stderr, "[flashspec] --backend cuda: %zu ops have no CUDA kernel and run through the host "
                 "(download, compute, upload): %s\n", ops.size(), describe_host_fallbacks(ops).c_str());
  });
}

}  // namespace

std::unique_ptr<Backend> load_cuda_backend(int device) {
  // Never closed: the backend's code lives in it, and the CUDA runtime registers exit
  // handlers there. dlopen counts references, so a second backend reuses the mapping.
  const std::string path = executable_dir() + FLASHSPEC_CUDA_PLUGIN;
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw Error(std::string("--backend cuda: cannot load the CUDA backend: ") + ::dlerror());
  const auto entry = reinterpret_cast<CudaPluginEntry>(::dlsym(lib, "flashspec_cuda_make_backend"));
  if (!entry) throw Error("--backend cuda: " + path + " is not a flashspec CUDA backend");
  std::string error;
  Backend* be = entry(device, &error);
  if (!be) throw Error(error);
  std::unique_ptr<Backend> backend(be);
  tell_host_fallbacks(*backend);
  return backend;
}
#else
std::unique_ptr<Backend> load_cuda_backend(int) {
  throw Error("--backend cuda: this build of flashspec has no CUDA backend (nvcc was not found when it was configured)");
}
#endif

std::span<const HostFallbackOp> cuda_host_fallback_ops() { return kCudaHostFallbackOps; }

}  // namespace flashspec
