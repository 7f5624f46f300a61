#pragma once
// A grammar as the engine's LogitConstraint (core/logit_constraint.h): the token masker's
// masks applied to logits, its matcher's states as the constraint's states. One per
// sequence being generated (the masker's matcher is the sequence's own); the vocabulary
// trie, built once per tokenizer, is shared, and so may be the node masks (a server's
// requests with the same grammar share one NodeMaskCache, so a second request's masks are
// cheap).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/logit_constraint.h"
#include "grammar/token_masker.h"

namespace flashspec::grammar {

class GrammarConstraint final : public LogitConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab);
  explicit GrammarConstraint(std::shared_ptr<NodeMaskCache> masks);

  State start() override { return masker_.start().id; }
  void mask(std::span<float> logits, State s) override;
  std::optional<State> advance(State s, int32_t token) override;
  bool must_end(State s) override;
  std::optional<int32_t> forced(State s) override;
  std::exception_ptr failure() const override { return failure_; }

  TokenMasker& masker() { return masker_; }
  const TokenMasker& masker() const { return masker_; }

 private:
  TokenMasker masker_;
  std::vector<uint64_t> bits_;  // mask scratch, one word per 64 tokens
  std::exception_ptr failure_;  // the Error that stopped the rule (LogitConstraint::failure)
  // f(), or `if_failed` once the rule has failed (f's Error recorded as the failure).
  template <class T, class F>
  T or_failed(T if_failed, F&& f);
};

}  // namespace flashspec::grammar
