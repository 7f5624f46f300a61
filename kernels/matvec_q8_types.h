#pragma once
// Which weight types the CUDA backend multiplies in its 8-bit-activation mat-vec
// (kernels/cuda/matvec_q8.cu) at every row count; the others go to cuBLAS on dequantized
// tiles above 64 rows. A host header: the memory plan sizes the backend's scratch by it
// without a GPU (target/device_footprint.cpp).
#include "core/ggml_type.h"
#include "kernels/host_device.h"

namespace flashspec {

FS_HD constexpr bool uses_q8_activations(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 || t == GgmlType::Q4_K || t == GgmlType::Q6_K ||
         t == GgmlType::MXFP4;
}

}  // namespace flashspec
