#include "kernels/cpu/pack_weights.h"

#include <cstring>

#include "core/error.h"
#include "core/ggml_type.h"

namespace flashspec::cpu {

namespace {
constexpr int64_t kTile = 16;
}

bool packable_lanes16(const WeightMatrix& w) {
  return w.layout == WeightLayout::Rows && w.type == GgmlType::Q4_0 && w.rows > 0 && w.rows % kTile == 0 &&
         w.cols > 0;
}

void pack_lanes16(const WeightMatrix& w, uint8_t* dst) {
  if (!packable_lanes16(w)) throw Error("internal: packing a matrix that has no Lanes16 layout");
  const int64_t nb = w.cols / QK4_0, rs = nb * int64_t(sizeof(BlockQ4_0));
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.rows; r += kTile) {
    uint8_t* quants = dst + r * rs;
    uint8_t* scales = quants + nb * 256;
    for (int64_t i = 0; i < kTile; ++i) {
      const auto* row = reinterpret_cast<const BlockQ4_0*>(src + (r + i) * rs);
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(scales + b * 32 + 2 * i, &row[b].d, 2);
        for (int j = 0; j < 4; ++j) std::memcpy(quants + b * 256 + 64 * j + 4 * i, row[b].qs + 4 * j, 4);
      }
    }
  }
}

}  // namespace flashspec::cpu
