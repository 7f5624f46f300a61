#include "kernels/cpu/pack_weights.h"

#include "core/ggml_type.h"

namespace flashspec::cpu {

bool packable_lanes16(const WeightMatrix& w) {
  return w.layout == WeightLayout::Rows && w.type == GgmlType::Q4_0 && w.rows > 0 && w.rows % 16 == 0 &&
         w.cols > 0;
}

}  // namespace flashspec::cpu
