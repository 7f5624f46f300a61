#pragma once
// A grammar compiled to a byte automaton: every rule becomes a graph of nodes joined by
// byte-range edges and calls of other rules (a recursive transition network), which the
// matcher (matcher.h) runs as a pushdown recognizer. Compiling checks what would otherwise
// go wrong during generation: rules used but never defined, left recursion (a recognizer's
// stack would grow without consuming input), a grammar that matches no string at all, and
// size (counted repetitions expand into copies).
//
// Every node left after compiling can still reach the end of its rule, so any byte the
// automaton accepts leads somewhere that can finish: a matcher state is never a dead end.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar_def.h"

namespace flashspec::grammar {

struct CompileLimits {
  size_t max_nodes = size_t(1) << 18;            // automaton nodes, after expanding {m,n}
  size_t max_closure_entries = size_t(1) << 23;  // summed epsilon-closure sizes
};

class Grammar {
 public:
  struct Edge {
    uint8_t lo = 0, hi = 0;  // inclusive byte range
    uint32_t target = 0;
  };
  struct Call {
    uint32_t rule = 0;
    uint32_t ret = 0;  // where the caller continues once the rule has matched
  };

  // Error (one line, "grammar: ...") for an undefined rule, left recursion, a grammar
  // that matches nothing, or one beyond the limits.
  static std::shared_ptr<const Grammar> compile(const GrammarDef& def, const CompileLimits& limits = {});

  uint32_t root() const { return root_; }
  uint32_t rule_start(uint32_t rule) const { return rule_start_[rule]; }
  const std::string& rule_name(uint32_t rule) const { return rule_names_[rule]; }
  size_t rule_count() const { return rule_start_.size(); }
  size_t node_count() const { return final_.size(); }

  std::span<const Edge> edges(uint32_t node) const { return span_of(edges_, edge_begin_, node); }
  std::span<const Call> calls(uint32_t node) const { return span_of(calls_, call_begin_, node); }
  // The nodes reachable from `node` through epsilon moves, itself included, that do
  // something: have byte edges or calls, or end their rule. Filled for the nodes a
  // matcher enters (rule starts, edge targets, call returns); empty for the others.
  std::span<const uint32_t> closure(uint32_t node) const { return span_of(closure_, closure_begin_, node); }
  bool is_final(uint32_t node) const { return final_[node] != 0; }
  // Returning to `node` does nothing but end its rule: a call returning there needs no
  // stack frame of its own (a tail call), which keeps right recursion (list ::= item
  // ("," list)?) from growing the stack with every item.
  bool is_tail(uint32_t node) const { return tail_[node] != 0; }

  // The definition compiled (for to_gbnf() in logs and error reports).
  const GrammarDef& definition() const { return def_; }

 private:
  template <class T>
  static std::span<const T> span_of(const std::vector<T>& v, const std::vector<uint32_t>& begin, uint32_t node) {
    return {v.data() + begin[node], v.data() + begin[node + 1]};
  }
  friend class GrammarBuilder;

  GrammarDef def_;
  uint32_t root_ = 0;
  std::vector<uint32_t> rule_start_;
  std::vector<std::string> rule_names_;
  std::vector<Edge> edges_;
  std::vector<uint32_t> edge_begin_;  // node_count + 1 offsets into edges_
  std::vector<Call> calls_;
  std::vector<uint32_t> call_begin_;
  std::vector<uint32_t> closure_;
  std::vector<uint32_t> closure_begin_;
  std::vector<uint8_t> final_, tail_;
};

}  // namespace flashspec::grammar
