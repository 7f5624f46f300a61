#pragma once
// Host vectors into a backend's memory and back, for the tests that hold a backend's ops
// to the CPU's on the same inputs.
#include <algorithm>
#include <vector>

#include "kernels/backend_buffer.h"

namespace flashspec::testing {

// A buffer holding v (one element's room when v is empty, so that it has an address).
template <class T>
BackendBuffer to_gpu(Backend& be, const std::vector<T>& v) {
  BackendBuffer b(be, std::max<size_t>(v.size(), 1) * sizeof(T));
  if (!v.empty()) be.upload(b.get(), v.data(), v.size() * sizeof(T));
  return b;
}

template <class T>
std::vector<T> from_gpu(Backend& be, const BackendBuffer& b, size_t n) {
  std::vector<T> v(n);
  be.download(v.data(), b.get(), n * sizeof(T));
  return v;
}

}  // namespace flashspec::testing
