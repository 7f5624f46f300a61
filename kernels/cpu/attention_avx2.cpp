// CPU attention's work items built for avx2 (the file name picks the compiler flags).
#include "kernels/cpu/attention_items.h"

namespace flashspec::cpu {

void attend_items_avx2(const AttentionArgs& a, const TreeKeys& tree, int64_t b, int64_t e) {
  attend_items(a, tree, b, e);
}

}  // namespace flashspec::cpu
