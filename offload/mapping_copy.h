#pragma once
// Copies out of a file mapping that let the mapping's pages go as they go, so that the
// process does not hold a model's bytes twice (the loaded layers, the output head).
#include <cstdint>
#include <span>

#include "offload/aligned_buffer.h"

namespace flashspec {

// `bytes` of a file mapping copied to `dst`; the mapping's pages of the source are let go
// afterwards (their page-cache copy stays), so the process does not hold both. Only for a
// file mapping: on anonymous or heap memory, letting pages go discards their contents.
void copy_from_mapping(uint8_t* dst, std::span<const uint8_t> bytes);
// Lets go of the whole pages of a file mapping within `bytes`, as copy_from_mapping does.
void let_go_of_mapping(std::span<const uint8_t> bytes);
// The same into a buffer of their own.
AlignedBuffer copy_out_of_mapping(std::span<const uint8_t> bytes);

}  // namespace flashspec
