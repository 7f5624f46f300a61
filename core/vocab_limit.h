#pragma once
// Most tokens a vocabulary may have (the largest real ones have about 260k): the one bound
// the tokenizer and the model config check, so that hostile metadata cannot drive huge
// allocations.
#include <cstdint>

namespace flashspec {

inline constexpr int64_t kMaxVocab = int64_t(1) << 22;

}  // namespace flashspec
