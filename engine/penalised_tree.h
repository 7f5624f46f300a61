#pragma once
// Repetition penalties and logit bias (core/sampler_penalties.h) over a verified speculation
// tree: each node's row of the target's logits is adjusted for that node's own history, the
// committed sequence plus the tokens along its path. The acceptance rules then see the
// penalised target distribution at every node, exactly what the target alone would sample
// from after the same tokens, so speculation stays lossless for it.
#include <cstdint>
#include <span>

#include "core/sampler.h"
#include "core/token_tree.h"

namespace flashspec {

// `committed`: the sequence so far, ending with the tree's root token. `logits`: n_vocab
// per node, node order. The window's counts are taken once, then moved along the tree by a
// depth-first walk (one token in and out per edge), so a tree costs its nodes plus the
// window, not nodes x window.
void penalise_tree_logits(const SamplingParams& p, std::span<const int32_t> committed, const TokenTree& tree,
                          std::span<float> logits, int64_t n_vocab);

}  // namespace flashspec
