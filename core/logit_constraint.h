#pragma once
// A rule that limits which tokens a generation may produce next (a grammar, for structured
// output), applied where tokens are drawn: the target's logits of a position are masked
// with the rule's state there before sampling or acceptance, and the state moves on with
// each emitted token. The engine sees only this interface, so generate, chat and the server
// can hand it any rule (grammar/grammar_constraint.h is the grammar's).
//
// A state is a small value (4 bytes) that copies for free: a speculation tree keeps one per
// node, and forking is assigning. One object serves one sequence at a time (its methods may
// fill caches, so they are not const and not thread-safe).
#include <cstdint>
#include <exception>
#include <optional>
#include <span>

namespace flashspec {

class LogitConstraint {
 public:
  using State = uint32_t;
  virtual ~LogitConstraint() = default;

  // The state before the first generated token.
  virtual State start() = 0;
  // Sets the logits of the tokens refused in state `s` to -infinity. Error when it refuses
  // every token (nothing could be drawn).
  virtual void mask(std::span<float> logits, State s) = 0;
  // The state after `token`, or nullopt when the rule refuses it there.
  virtual std::optional<State> advance(State s, int32_t token) = 0;
  // Nothing but the end may follow: the generation stops here.
  virtual bool must_end(State s) = 0;
  // The one token allowed in state `s`, when only one is (nullopt when several are). Such
  // a token has probability 1 under the rule whatever the model says, so a draft may
  // append it without asking the draft model, and the target always accepts it.
  virtual std::optional<int32_t> forced(State s) = 0;
  // Why the rule could not go on, if it could not (a grammar too ambiguous to match, no
  // token left to continue): from then on it masks nothing, accepts every token and asks for
  // the end, so that the generation stops at its next token without failing the other
  // sequences of a batch pass, and its end raises this error (Session::generate,
  // BatchSession::take). Null while the rule is fine.
  virtual std::exception_ptr failure() const { return nullptr; }

  // The state after `tokens` from the start (nullopt when the rule refuses one).
  std::optional<State> replay(std::span<const int32_t> tokens) {
    std::optional<State> s = start();
    for (const int32_t t : tokens)
      if (!(s = advance(*s, t))) return std::nullopt;
    return s;
  }
};

}  // namespace flashspec
