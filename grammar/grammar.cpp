#include "grammar/grammar.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "grammar/inlining.h"
#include "grammar/utf8_ranges.h"

namespace flashspec::grammar {

namespace {

struct BuildNode {
  std::vector<Grammar::Edge> edges;
  std::vector<Grammar::Call> calls;
  std::vector<uint32_t> eps;
  uint32_t rule = 0;
};

[[noreturn]] void fail(const std::string& what) { throw Error("grammar: " + what); }

}  // namespace

// Expression trees -> automaton (Thompson's construction, with calls for rule references),
// then the checks and the flat arrays the matcher reads.
class GrammarBuilder {
 public:
  GrammarBuilder(const GrammarDef& def, const CompileLimits& limits) : def_(def), limits_(limits) {}

  std::shared_ptr<const Grammar> run() {
    if (def_.rules.empty() || def_.root >= def_.rules.size()) fail("no root rule");
    for (const Rule& r : def_.rules)
      if (!r.defined)
        fail("rule \"" + r.name + "\" is used but not defined" + (r.where.empty() ? "" : " (" + r.where + ")"));
    const size_t n_rules = def_.rules.size();
    inline_size_ = plan_inlining(def_);
    start_.resize(n_rules);
    final_node_.resize(n_rules);
    for (uint32_t r = 0; r < n_rules; ++r) {
      rule_ = r;
      start_[r] = new_node();
      final_node_[r] = build(def_.rules[r].body, start_[r], 1);
    }
    prune_unproductive();
    check_left_recursion();
    return finish();
  }

 private:
  uint32_t new_node() {
    if (nodes_.size() >= limits_.max_nodes)
      fail("too large: more than " + std::to_string(limits_.max_nodes) +
           " automaton nodes (counted repetitions expand into copies)");
    nodes_.push_back({});
    nodes_.back().rule = rule_;
    return uint32_t(nodes_.size() - 1);
  }

  // Adds the nodes and edges of `e` starting at `from`; returns the node where it ends.
  // No construction adds an edge into its own `from` (loops get fresh nodes), so parts of
  // an alternative can all start at one node. `copies` is how many times the enclosing
  // counted repetitions build this expression: an inlined rule is copied that often.
  uint32_t build(const Expr& e, uint32_t from, size_t copies) {
    switch (e.kind) {
      case Expr::Kind::Empty: return from;
      case Expr::Kind::Literal: {
        uint32_t cur = from;
        for (unsigned char c : e.text) {
          const uint32_t next = new_node();
          nodes_[cur].edges.push_back({c, c, next});
          cur = next;
        }
        return cur;
      }
      case Expr::Kind::Class: return build_class(e.ranges, from);
      case Expr::Kind::Ref: {
        const size_t size = inline_size_[e.rule];
        if (size != kNeverInline && size <= kInlineBudget / std::max<size_t>(copies, 1))
          return build(def_.rules[e.rule].body, from, copies);
        const uint32_t to = new_node();
        nodes_[from].calls.push_back({e.rule, to});
        return to;
      }
      case Expr::Kind::Seq: {
        uint32_t cur = from;
        for (const Expr& p : e.items) cur = build(p, cur, copies);
        return cur;
      }
      case Expr::Kind::Alt: {
        const uint32_t to = new_node();
        for (const Expr& p : e.items) {
          // A fresh entry per part: a part that ends where it starts (an empty one) must
          // not add its exit edge to the shared `from`.
          const uint32_t in = new_node();
          nodes_[from].eps.push_back(in);
          nodes_[build(p, in, copies)].eps.push_back(to);
        }
        return to;
      }
      case Expr::Kind::Repeat: {
        const Expr& part = e.items[0];
        const size_t n = e.max == kUnbounded ? size_t(e.min) + 1 : size_t(e.max);
        copies = n != 0 && copies > SIZE_MAX / n ? SIZE_MAX : copies * n;
        uint32_t cur = from;
        for (uint32_t i = 0; i < e.min; ++i) cur = build(part, cur, copies);
        if (e.max == kUnbounded) {
          const uint32_t loop = new_node();
          nodes_[cur].eps.push_back(loop);
          nodes_[build(part, loop, copies)].eps.push_back(loop);
          return loop;
        }
        // x{0,k} as (x (x (...)?)?)?: each optional copy may stop the chain.
        const uint32_t to = new_node();
        for (uint32_t i = e.min; i < e.max; ++i) {
          nodes_[cur].eps.push_back(to);
          const uint32_t in = new_node();
          nodes_[cur].eps.push_back(in);
          cur = build(part, in, copies);
        }
        nodes_[cur].eps.push_back(to);
        return to;
      }
    }
    return from;
  }

  // A code point class: one path per UTF-8 byte-range sequence, with paths that end alike
  // sharing their nodes (every 3-byte sequence ends in the same "two continuation bytes
  // left" node), so that after a lead byte a single node is live.
  uint32_t build_class(const std::vector<CodeRange>& ranges, uint32_t from) {
    const uint32_t to = new_node();
    std::map<std::vector<ByteRange>, uint32_t> suffix_node;
    for (const Utf8Sequence& seq : utf8_sequences(ranges)) {
      uint32_t next = to;
      for (size_t k = seq.size(); k-- > 1;) {
        std::vector<ByteRange> suffix(seq.begin() + ptrdiff_t(k), seq.end());
        auto [it, added] = suffix_node.try_emplace(std::move(suffix), 0);
        if (added) {
          it->second = new_node();
          nodes_[it->second].edges.push_back({seq[k].lo, seq[k].hi, next});
        }
        next = it->second;
      }
      nodes_[from].edges.push_back({seq[0].lo, seq[0].hi, next});
    }
    return to;
  }

  // Nodes from which the end of their rule can be reached, moving along byte edges (when
  // `bytes`), epsilon edges, and calls of rules that themselves qualify. A worklist over
  // reversed edges: linear in the automaton.
  std::vector<uint8_t> reaches_end(bool bytes, std::vector<uint8_t>& rule_ok) const {
    const size_t n = nodes_.size();
    std::vector<std::vector<uint32_t>> preds(n);                   // plain predecessors
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> call_preds(n);  // ret -> (caller, rule)
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> callers(def_.rules.size());  // rule -> (caller, ret)
    for (uint32_t u = 0; u < n; ++u) {
      if (bytes)
        for (const auto& e : nodes_[u].edges) preds[e.target].push_back(u);
      for (uint32_t v : nodes_[u].eps) preds[v].push_back(u);
      for (const auto& c : nodes_[u].calls) {
        call_preds[c.ret].push_back({u, c.rule});
        callers[c.rule].push_back({u, c.ret});
      }
    }
    std::vector<uint8_t> ok(n, 0);
    rule_ok.assign(def_.rules.size(), 0);
    std::vector<uint32_t> work;
    auto mark = [&](uint32_t v) {
      if (!ok[v]) {
        ok[v] = 1;
        work.push_back(v);
      }
    };
    for (uint32_t r = 0; r < def_.rules.size(); ++r) mark(final_node_[r]);
    while (!work.empty()) {
      const uint32_t v = work.back();
      work.pop_back();
      for (uint32_t u : preds[v]) mark(u);
      for (auto [u, rule] : call_preds[v])
        if (rule_ok[rule]) mark(u);
      const uint32_t r = nodes_[v].rule;
      if (v == start_[r] && !rule_ok[r]) {
        rule_ok[r] = 1;
        for (auto [u, ret] : callers[r])
          if (ok[ret]) mark(u);
      }
    }
    return ok;
  }

  // Drops every edge and call that leads where the rule can no longer end.
  void prune_unproductive() {
    std::vector<uint8_t> rule_ok;
    const std::vector<uint8_t> ok = reaches_end(true, rule_ok);
    if (!rule_ok[def_.root]) fail("no string matches rule \"" + def_.rules[def_.root].name + "\"");
    for (BuildNode& nd : nodes_) {
      std::erase_if(nd.edges, [&](const Grammar::Edge& e) { return !ok[e.target]; });
      std::erase_if(nd.eps, [&](uint32_t v) { return !ok[v]; });
      std::erase_if(nd.calls, [&](const Grammar::Call& c) { return !rule_ok[c.rule] || !ok[c.ret]; });
    }
  }

  // A rule that can reach a call of itself without consuming a byte would make the
  // recognizer push frames forever. Found by following, from each rule's start, epsilon
  // edges and calls (past the calls of rules that can match the empty string).
  void check_left_recursion() {
    std::vector<uint8_t> nullable;
    reaches_end(false, nullable);
    const size_t n_rules = def_.rules.size();
    std::vector<std::vector<uint32_t>> left(n_rules);
    std::vector<uint32_t> seen(nodes_.size(), UINT32_MAX), work;
    for (uint32_t r = 0; r < n_rules; ++r) {
      work = {start_[r]};
      seen[start_[r]] = r;
      while (!work.empty()) {
        const uint32_t u = work.back();
        work.pop_back();
        auto visit = [&](uint32_t v) {
          if (seen[v] != r) {
            seen[v] = r;
            work.push_back(v);
          }
        };
        for (uint32_t v : nodes_[u].eps) visit(v);
        for (const auto& c : nodes_[u].calls) {
          left[r].push_back(c.rule);
          if (nullable[c.rule]) visit(c.ret);
        }
      }
    }
    // Depth-first search for a cycle, iteratively (deep rule chains must not overflow).
    std::vector<uint8_t> color(n_rules, 0);  // 0 new, 1 on the path, 2 done
    for (uint32_t r0 = 0; r0 < n_rules; ++r0) {
      if (color[r0]) continue;
      std::vector<std::pair<uint32_t, size_t>> path{{r0, 0}};
      color[r0] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t s = left[r][i++];
        if (color[s] == 1) {
          std::string cycle;
          bool on = false;
          for (const auto& [q, unused] : path) {
            on = on || q == s;
            if (on) cycle += def_.rules[q].name + " -> ";
          }
          fail("left recursion: " + cycle + def_.rules[s].name);
        }
        if (color[s] == 0) {
          color[s] = 1;
          path.push_back({s, 0});
        }
      }
    }
  }

  std::shared_ptr<const Grammar> finish() {
    auto g = std::make_shared<Grammar>();
    const size_t n = nodes_.size();
    g->def_ = def_;
    g->root_ = def_.root;
    g->rule_start_ = start_;
    for (const Rule& r : def_.rules) g->rule_names_.push_back(r.name);
    g->final_.assign(n, 0);
    for (uint32_t f : final_node_) g->final_[f] = 1;
    g->edge_begin_.push_back(0);
    g->call_begin_.push_back(0);
    for (const BuildNode& nd : nodes_) {
      g->edges_.insert(g->edges_.end(), nd.edges.begin(), nd.edges.end());
      g->calls_.insert(g->calls_.end(), nd.calls.begin(), nd.calls.end());
      g->edge_begin_.push_back(uint32_t(g->edges_.size()));
      g->call_begin_.push_back(uint32_t(g->calls_.size()));
    }
    // Closures of the nodes a matcher enters.
    std::vector<uint8_t> entered(n, 0);
    for (uint32_t s : start_) entered[s] = 1;
    for (const BuildNode& nd : nodes_) {
      for (const auto& e : nd.edges) entered[e.target] = 1;
      for (const auto& c : nd.calls) entered[c.ret] = 1;
    }
    std::vector<uint32_t> seen(n, UINT32_MAX), work;
    g->closure_begin_.push_back(0);
    g->tail_.assign(n, 0);
    for (uint32_t u = 0; u < n; ++u) {
      if (entered[u]) {
        const size_t first = g->closure_.size();
        work = {u};
        seen[u] = u;
        while (!work.empty()) {
          const uint32_t v = work.back();
          work.pop_back();
          const BuildNode& nd = nodes_[v];
          if (!nd.edges.empty() || !nd.calls.empty() || g->final_[v]) g->closure_.push_back(v);
          for (uint32_t w : nd.eps)
            if (seen[w] != u) {
              seen[w] = u;
              work.push_back(w);
            }
        }
        if (g->closure_.size() > limits_.max_closure_entries)
          fail("too large: epsilon closures beyond " + std::to_string(limits_.max_closure_entries) + " entries");
        std::sort(g->closure_.begin() + ptrdiff_t(first), g->closure_.end());
        const size_t count = g->closure_.size() - first;
        const uint32_t only = count == 1 ? g->closure_[first] : UINT32_MAX;
        g->tail_[u] = only != UINT32_MAX && g->final_[only] && nodes_[only].edges.empty() && nodes_[only].calls.empty();
      }
      g->closure_begin_.push_back(uint32_t(g->closure_.size()));
    }
    return g;
  }

  const GrammarDef& def_;
  const CompileLimits limits_;
  std::vector<size_t> inline_size_;  // per rule: an inlined copy's size, or kNeverInline
  std::vector<BuildNode> nodes_;
  std::vector<uint32_t> start_, final_node_;
  uint32_t rule_ = 0;
};

std::shared_ptr<const Grammar> Grammar::compile(const GrammarDef& def, const CompileLimits& limits) {
  return GrammarBuilder(def, limits).run();
}

}  // namespace flashspec::grammar
