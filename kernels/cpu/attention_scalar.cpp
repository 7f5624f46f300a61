// CPU attention's work items built for scalar (the file name picks the compiler flags).
#include "kernels/cpu/attention_items.h"

namespace flashspec::cpu {

void attend_items_scalar(const AttentionJob& job, std::atomic<int64_t>& next) { attend_items(job, next); }

}  // namespace flashspec::cpu
