// CPU attention's work items built for avx512 (the file name picks the compiler flags).
#include "kernels/cpu/attention_items.h"

namespace flashspec::cpu {

void attend_items_avx512(const AttentionJob& job, std::atomic<int64_t>& next) { attend_items(job, next); }

}  // namespace flashspec::cpu
