// Which ops a backend runs through the host (kernels/host_fallback.h): read off each
// backend class at compile time, and the CUDA backend's known without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda_loader.h"
#include "kernels/host_fallback.h"
#include "tests/cli_runner.h"
#include "tests/device_like_backend.h"
#include "tests/fixtures.h"
#include "tests/gpu_or_skip.h"
#ifdef FLASHSPEC_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

using namespace flashspec;

namespace {

std::vector<std::string> names(std::span<const HostFallbackOp> ops) {
  std::vector<std::string> out;
  for (const HostFallbackOp& op : ops) out.emplace_back(op.name);
  return out;
}

// A backend class that overrides two of the ops with host defaults and keeps the rest.
struct TwoKernels : Backend {
  void gelu_mul(float*, const float*, int64_t) override {}
  void delta_net(std::span<const DeltaNetCall>) override {}
};

}  // namespace

// The CPU backend computes every op itself, and a backend class that overrides none of
// them leaves every one to the host, in the table's order.
static_assert(host_fallbacks_of<CpuBackend>().empty());
static_assert(std::ranges::equal(host_fallbacks_of<Backend>(), kHostDefaultOps));
static_assert(host_fallbacks_of<TwoKernels>().size() == kHostDefaultOps.size() - 2);
#ifdef FLASHSPEC_HAVE_CUDA
// What cuda_backend.cu checks, checked here too: the table matches the class.
static_assert(std::ranges::equal(host_fallbacks_of<cuda::CudaBackend>(), kCudaHostFallbackOps));
#endif

TEST_CASE("host fallbacks: each backend names the ops it has no kernel for") {
  CHECK(CpuBackend(1).host_fallback_ops().empty());
  // The device-like backend runs the host defaults as a GPU backend without those kernels would.
  testing::DeviceLikeBackend device_like(1);
  CHECK(names(device_like.host_fallback_ops()) ==
        std::vector<std::string>{"gelu_mul", "scale", "swiglu_oai_mul", "deinterleave", "sigmoid_mul", "delta_net",
                                 "delta_replay", "gather_rows", "weighted_sum_rows"});
  CHECK(names(kHostFallbacksOf<TwoKernels>) ==
        std::vector<std::string>{"scale", "swiglu_oai_mul", "deinterleave", "sigmoid_mul", "delta_replay",
                                 "gather_rows", "weighted_sum_rows"});
  // How the loader's line and inspect name them: runs of ops used by the same models.
  CHECK(describe_host_fallbacks(device_like.host_fallback_ops()) ==
        "gelu_mul, scale (Gemma 3); swiglu_oai_mul (gpt-oss); deinterleave, sigmoid_mul, delta_net, delta_replay "
        "(Qwen3.5 hybrids); gather_rows (mixtures of experts, MTP drafts); weighted_sum_rows (mixtures of experts)");
  CHECK(describe_host_fallbacks({}).empty());
}

TEST_CASE("host fallbacks: the CUDA backend has a kernel for every op, known without loading it or a GPU") {
  CHECK(cuda_host_fallback_ops().empty());
}

TEST_CASE("host fallbacks: a CUDA backend answers its build's table, and generate has nothing to say of it") {
  const std::unique_ptr<Backend> gpu = testing::gpu_or_skip();
  if (!gpu) return;
  CHECK(std::ranges::equal(gpu->host_fallback_ops(), cuda_host_fallback_ops()));
  // The draft's backend is a second CUDA backend: the line still comes once.
  const testing::CliResult r = testing::run_cli({"generate", "-m", testing::model_path("stories260K"), "-d",
                                                 testing::model_path("salty279K"), "-p", "x", "-n", "4", "--backend",
                                                 "cuda"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("have no CUDA kernel") == std::string::npos);
}
