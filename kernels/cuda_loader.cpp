#include "kernels/cuda_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>

#include "core/error.h"

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
  return std::unique_ptr<Backend>(be);
}
#else
std::unique_ptr<Backend> load_cuda_backend(int) {
  throw Error("--backend cuda: this build of flashspec has no CUDA backend (nvcc was not found when it was configured)");
}
#endif

}  // namespace flashspec
