#include "grammar/inlining.h"

#include <algorithm>

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
      return top < 0x80 ? 1 : top < 0x800 ? 2 : top < 0x10000 ? 3 : 4;
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

}  // namespace

std::vector<size_t> plan_inlining(const GrammarDef& def) {
  const size_t n = def.rules.size();
  std::vector<std::vector<uint32_t>> refs(n);
  for (uint32_t r = 0; r < n; ++r) collect_refs(def.rules[r].body, refs[r]);
  // A rule is recursive when it reaches itself through references.
  std::vector<uint8_t> recursive(n, 0);
  std::vector<uint32_t> seen(n, UINT32_MAX), work;
  for (uint32_t r = 0; r < n; ++r) {
    work = refs[r];
    while (!work.empty() && !recursive[r]) {
      const uint32_t q = work.back();
      work.pop_back();
      if (q == r) recursive[r] = 1;
      if (seen[q] == r) continue;
      seen[q] = r;
      work.insert(work.end(), refs[q].begin(), refs[q].end());
    }
  }
  // Sizes and longest matches, counting the rules inlined into them (non-recursive rules
  // form a DAG, so the memoized recursion ends).
  std::vector<size_t> size(n, kNeverInline), longest(n, SIZE_MAX);
  std::vector<uint8_t> done(n, 0);
  auto inlined = [&](uint32_t r) {
    return !recursive[r] && r != def.root && longest[r] <= kInlineBytes && size[r] <= kInlineNodes;
  };
  auto visit = [&](auto& self, uint32_t r) -> void {
    if (done[r]) return;
    done[r] = 1;
    if (recursive[r]) return;
    const Expr& body = def.rules[r].body;
    longest[r] = max_length(body, [&](uint32_t q) {
      self(self, q);
      return longest[q];
    });
    size[r] = estimate(body, [&](uint32_t q) {
      self(self, q);
      return inlined(q) ? size[q] : size_t(1);
    });
  };
  for (uint32_t r = 0; r < n; ++r) visit(visit, r);
  std::vector<size_t> plan(n, kNeverInline);
  for (uint32_t r = 0; r < n; ++r)
    if (inlined(r)) plan[r] = size[r];
  return plan;
}

}  // namespace flashspec::grammar
