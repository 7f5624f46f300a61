#pragma once
// Which Backend ops a backend runs through the host. Backend gives some ops a default
// that downloads the operands, computes on the host and uploads the result: right on
// every backend, slow on a GPU. A backend class that does not override one of them has no
// kernel of its own for it, which host_fallbacks_of<B>() reads off the class at compile
// time; each backend answers Backend::host_fallback_ops() with it.
//
// kCudaHostFallbackOps is the CUDA backend's list as a plain table, readable where the
// plugin is not loaded or no GPU is present (`flashspec inspect --backend cuda`); the CUDA
// backend checks at compile time that it equals host_fallbacks_of<CudaBackend>(), so a new
// CUDA kernel that leaves the table stale does not build.
#include <algorithm>
#include <array>
#include <iterator>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/backend.h"

namespace flashspec {

// Every op with a host default in Backend, in the order host_fallback_detail::inherited
// tests them.
inline constexpr std::array<HostFallbackOp, 9> kHostDefaultOps = {{
    {"gelu_mul", "Gemma 3"},
    {"scale", "Gemma 3"},
    {"swiglu_oai_mul", "gpt-oss"},
    {"deinterleave", "Qwen3.5 hybrids"},
    {"sigmoid_mul", "Qwen3.5 hybrids"},
    {"delta_net", "Qwen3.5 hybrids"},
    {"delta_replay", "Qwen3.5 hybrids"},
    {"gather_rows", "mixtures of experts, MTP drafts"},
    {"weighted_sum_rows", "mixtures of experts"},
}};

namespace host_fallback_detail {

// Whether B keeps Backend's host default of each op of kHostDefaultOps: &B::op names
// Backend's member (and has Backend's member-pointer type) unless B declares its own.
template <class B>
constexpr std::array<bool, kHostDefaultOps.size()> inherited() {
  return {std::is_same_v<decltype(&B::gelu_mul), decltype(&Backend::gelu_mul)>,
          std::is_same_v<decltype(&B::scale), decltype(&Backend::scale)>,
          std::is_same_v<decltype(&B::swiglu_oai_mul), decltype(&Backend::swiglu_oai_mul)>,
          std::is_same_v<decltype(&B::deinterleave), decltype(&Backend::deinterleave)>,
          std::is_same_v<decltype(&B::sigmoid_mul), decltype(&Backend::sigmoid_mul)>,
          std::is_same_v<decltype(&B::delta_net), decltype(&Backend::delta_net)>,
          std::is_same_v<decltype(&B::delta_replay), decltype(&Backend::delta_replay)>,
          std::is_same_v<decltype(&B::gather_rows), decltype(&Backend::gather_rows)>,
          std::is_same_v<decltype(&B::weighted_sum_rows), decltype(&Backend::weighted_sum_rows)>};
}

template <class B>
constexpr size_t count() {
  const auto in = inherited<B>();
  return size_t(std::count(in.begin(), in.end(), true));
}

}  // namespace host_fallback_detail

// The ops backend class B runs through the host, in kHostDefaultOps' order.
template <class B>
constexpr std::array<HostFallbackOp, host_fallback_detail::count<B>()> host_fallbacks_of() {
  std::array<HostFallbackOp, host_fallback_detail::count<B>()> out{};
  const auto in = host_fallback_detail::inherited<B>();
  size_t n = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i]) out[n++] = kHostDefaultOps[i];
  return out;
}

// Static storage for a backend's answer to Backend::host_fallback_ops().
template <class B>
inline constexpr auto kHostFallbacksOf = host_fallbacks_of<B>();

// The CUDA backend's (kernels/cuda/cuda_backend.h): it has a kernel for every op. An op
// given a host default later, without a CUDA kernel, must be listed here (cuda_backend.cu
// checks it at compile time).
inline constexpr std::array<HostFallbackOp, 0> kCudaHostFallbackOps{};

// "gelu_mul, scale (Gemma 3); deinterleave, ... (Qwen3.5 hybrids); ...": the ops in
// order, each run of ops used by the same models followed by those models.
inline std::string describe_host_fallbacks(std::span<const HostFallbackOp> ops) {
  std::string s;
  for (size_t i = 0; i < ops.size(); ++i) {
    const bool first_of_run = i == 0 || ops[i - 1].used_by != ops[i].used_by;
    if (first_of_run && i > 0) s += "; ";
    if (!first_of_run) s += ", ";
    s += ops[i].name;
    if (i + 1 == ops.size() || ops[i + 1].used_by != ops[i].used_by) s += " (" + std::string(ops[i].used_by) + ")";
  }
  return s;
}

}  // namespace flashspec
