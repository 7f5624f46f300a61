// CPU attention's work items built for avx512 (the file name picks the compiler flags).
#include "kernels/cpu/attention_items.h"

namespace flashspec::cpu {

void attend_items_avx512(const AttentionArgs& a, const TreeKeys& tree, std::atomic<int64_t>& next, int64_t items,
                         AttendScratch& scratch) {
  attend_items(a, tree, next, items, scratch);
}

}  // namespace flashspec::cpu
