#include "grammar/grammar_constraint.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec::grammar {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab)
    : masker_(std::move(grammar), std::move(vocab)), bits_(masker_.mask_words()) {}

GrammarConstraint::GrammarConstraint(std::shared_ptr<NodeMaskCache> masks)
    : masker_(std::move(masks)), bits_(masker_.mask_words()) {}

template <class T, class F>
T GrammarConstraint::or_failed(T if_failed, F&& f) {
  if (failure_) return if_failed;
  try {
    return f();
  } catch (const Error&) {
    failure_ = std::current_exception();
    return if_failed;
  }
}

void GrammarConstraint::mask(std::span<float> logits, State s) {
  or_failed(false, [&] {
    masker_.fill_mask(MatchState{s}, bits_);
    // A grammar never dead-ends on bytes, but a vocabulary may lack every token that spells
    // the bytes it wants next; all logits at -inf would make sampling divide by zero.
    if (std::all_of(bits_.begin(), bits_.end(), [](uint64_t w) { return w == 0; }))
      throw Error("grammar: no token of the model's vocabulary can continue the output here");
    mask_logits(logits, bits_);
    return true;
  });
}

std::optional<LogitConstraint::State> GrammarConstraint::advance(State s, int32_t token) {
  return or_failed(std::optional<State>(s), [&]() -> std::optional<State> {
    const MatchState next = masker_.accept_token(MatchState{s}, token);
    if (next.dead()) return std::nullopt;
    return next.id;
  });
}

bool GrammarConstraint::must_end(State s) {
  return or_failed(true, [&] {
    const MatchState m{s};
    if (!masker_.matcher().can_end(m)) return false;
    const auto next = masker_.matcher().next_bytes(m);
    return std::all_of(next.begin(), next.end(), [](uint64_t w) { return w == 0; });
  });
}

std::optional<int32_t> GrammarConstraint::forced(State s) {
  return or_failed(std::optional<int32_t>(), [&]() -> std::optional<int32_t> {
    const std::vector<int32_t> one = masker_.forced_tokens(MatchState{s}, 1);
    if (one.empty()) return std::nullopt;
    return one[0];
  });
}

}  // namespace flashspec::grammar
