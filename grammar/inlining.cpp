#include "grammar/inlining.h"

#include <algorithm>

#include "core/utf8.h"
#include "grammar/utf8_ranges.h"

namespace flashspec::grammar {

namespace {

// The longest string (in bytes) an expression matches; SIZE_MAX when unbounded.
template <class RefLength>
size_t max_length(const Expr& e, const RefLength& ref_length) {
  auto add = [](size_t a, size_t b) { return a + b < a ? SIZE_MAX : a + b; };
  switch (e.kind) {
    case Expr::Kind::Empty: return 0;
    case Expr::Kind::Literal: return e.text.size();
    case Expr::Kind::Class: {
      const uint32_t top = e.ranges.empty() ? 0 : e.ranges.back().hi;
      return size_t(utf8_length(top));
    }
    case Expr::Kind::Ref: return ref_length(e.rule);
    case Expr::Kind::Seq: {
      size_t total = 0;
      for (const Expr& p : e.items) total = add(total, max_length(p, ref_length));
      return total;
    }
    case Expr::Kind::Alt: {
      size_t longest = 0;
      for (const Expr& p : e.items) longest = std::max(longest, max_length(p, ref_length));
      return longest;
    }
    case Expr::Kind::Repeat: {
      const size_t part = max_length(e.items[0], ref_length);
      if (part == 0) return 0;
      if (e.max == kUnbounded || part == SIZE_MAX) return SIZE_MAX;
      return part > SIZE_MAX / e.max ? SIZE_MAX : part * e.max;
    }
  }
  return 0;
}

void collect_refs(const Expr& e, std::vector<uint32_t>& out) {
  if (e.kind == Expr::Kind::Ref) out.push_back(e.rule);
  for (const Expr& p : e.items) collect_refs(p, out);
}

// Automaton nodes an expression compiles to (about), a reference costing ref_size(rule).
template <class RefSize>
size_t estimate(const Expr& e, const RefSize& ref_size) {
  auto add = [](size_t a, size_t b) { return a + b < a ? SIZE_MAX : a + b; };
  switch (e.kind) {
    case Expr::Kind::Empty: return 0;
    case Expr::Kind::Literal: return e.text.size();
    case Expr::Kind::Class: {
      size_t total = 1;  // at most one node per byte of each sequence but its first
      for (const Utf8Sequence& seq : utf8_sequences(e.ranges)) total += seq.size() - 1;
      return total;
    }
    case Expr::Kind::Ref: return ref_size(e.rule);
    case Expr::Kind::Seq:
    case Expr::Kind::Alt: {
      size_t total = e.items.size();
      for (const Expr& p : e.items) total = add(total, estimate(p, ref_size));
      return total;
    }
    case Expr::Kind::Repeat: {
      const size_t part = add(estimate(e.items[0], ref_size), 2);
      const size_t copies = e.max == kUnbounded ? size_t(e.min) + 1 : size_t(e.max);
      return part != 0 && copies > SIZE_MAX / part ? SIZE_MAX : part * copies + 1;
    }
  }
  return 0;
}

// The rules' strongly connected components (Tarjan's, with its own stacks, in time linear
// in the references: a chain of 100,000 rules naming each other is a GBNF file a client may
// send). A rule is recursive when it reaches itself: it names itself, or its component has
// more than one rule. `order` lists every rule after all the rules it reaches outside its
// own component, as Tarjan's algorithm completes components.
struct RuleGraph {
  std::vector<uint8_t> recursive;
  std::vector<uint32_t> order;
};

RuleGraph rule_graph(const std::vector<std::vector<uint32_t>>& refs) {
  const size_t n = refs.size();
  constexpr uint32_t kUnseen = UINT32_MAX;
  RuleGraph g{std::vector<uint8_t>(n, 0), {}};
  g.order.reserve(n);
  std::vector<uint32_t> index(n, kUnseen), low(n, 0);
  std::vector<uint8_t> on_stack(n, 0);
  std::vector<uint32_t> component;                 // Tarjan's stack
  std::vector<std::pair<uint32_t, size_t>> calls;  // a rule, and the next of its refs to follow
  uint32_t counter = 0;
  auto enter = [&](uint32_t r) {
    index[r] = low[r] = counter++;
    component.push_back(r);
    on_stack[r] = 1;
    calls.push_back({r, 0});
  };
  for (uint32_t start = 0; start < n; ++start) {
    if (index[start] != kUnseen) continue;
    enter(start);
    while (!calls.empty()) {
      const uint32_t r = calls.back().first;
      if (calls.back().second < refs[r].size()) {
        const uint32_t q = refs[r][calls.back().second++];
        if (q == r) g.recursive[r] = 1;
        if (index[q] == kUnseen)
          enter(q);
        else if (on_stack[q])
          low[r] = std::min(low[r], index[q]);
        continue;
      }
      calls.pop_back();
      if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[r]);
      if (low[r] != index[r]) continue;
      // r roots a component: everything above it on the stack.
      const size_t begin = size_t(std::find(component.rbegin(), component.rend(), r).base() - component.begin()) - 1;
      const bool cycle = component.size() - begin > 1;
      for (size_t i = begin; i < component.size(); ++i) {
        on_stack[component[i]] = 0;
        if (cycle) g.recursive[component[i]] = 1;
        g.order.push_back(component[i]);
      }
      component.resize(begin);
    }
  }
  return g;
}

}  // namespace

std::vector<size_t> plan_inlining(const GrammarDef& def) {
  const size_t n = def.rules.size();
  std::vector<std::vector<uint32_t>> refs(n);
  for (uint32_t r = 0; r < n; ++r) collect_refs(def.rules[r].body, refs[r]);
  const RuleGraph graph = rule_graph(refs);
  const std::vector<uint8_t>& recursive = graph.recursive;
  // Sizes and longest matches, counting the rules inlined into them, computed for each
  // non-recursive rule after the rules it names (they form a DAG, in graph.order).
  std::vector<size_t> size(n, kNeverInline), longest(n, SIZE_MAX);
  auto inlined = [&](uint32_t r) {
    return !recursive[r] && r != def.root && longest[r] <= kInlineBytes && size[r] <= kInlineNodes;
  };
  for (const uint32_t r : graph.order) {
    if (recursive[r]) continue;
    const Expr& body = def.rules[r].body;
    longest[r] = max_length(body, [&](uint32_t q) { return longest[q]; });
    size[r] = estimate(body, [&](uint32_t q) { return inlined(q) ? size[q] : size_t(1); });
  }
  std::vector<size_t> plan(n, kNeverInline);
  for (uint32_t r = 0; r < n; ++r)
    if (inlined(r)) plan[r] = size[r];
  return plan;
}

}  // namespace flashspec::grammar
