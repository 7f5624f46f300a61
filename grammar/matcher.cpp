#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <string>

#include "core/error.h"

namespace flashspec::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  scratch_.reset();
  close(grammar_->rule_start(grammar_->root()), kRootFrame);
  start_ = {intern_state()};
}

MatchState Matcher::accept_bytes(MatchState s, std::string_view bytes) {
  for (char c : bytes) {
    if (s.dead()) break;
    s = accept_byte(s, uint8_t(c));
  }
  return s;
}

namespace {

// An ambiguous grammar (root ::= ("a" root?)+) has a number of parses, and so of distinct
// stacks, that grows exponentially with the bytes matched: the work and memory of a step are
// bounded here, and passing a bound fails the generation with one line instead of hanging
// it. Grammars that describe data (JSON, schemas, tool calls) stay far below: a few dozen
// stack tops per state.
constexpr size_t kMaxTops = 4096;             // stack tops in one state
constexpr size_t kMaxStepPairs = 1 << 16;     // (node, stack) pairs expanded in one step
constexpr size_t kMaxFrames = size_t(1) << 22;  // frames a matcher holds (~64 MB with their index)

[[noreturn]] void too_ambiguous(const std::string& what) {
  throw TooAmbiguous("grammar: too ambiguous to match: " + what +
              " (it allows one text in exponentially many ways; write it so that each text parses one way)");
}

}  // namespace

uint32_t Matcher::frame(uint32_t node, uint32_t parent) {
  const uint64_t key = (uint64_t(node) << 32) | parent;
  auto [it, added] = frame_index_.try_emplace(key, uint32_t(frames_.size()));
  if (added) {
    if (frames_.size() >= kMaxFrames) {
      frame_index_.erase(it);
      too_ambiguous("more than " + std::to_string(kMaxFrames) + " stack frames");
    }
    frames_.push_back({node, parent});
  }
  return it->second;
}

void Matcher::close(uint32_t node, uint32_t parent) {
  Scratch& sc = scratch_;
  const Grammar& g = *grammar_;
  auto enqueue = [&](uint32_t t, uint32_t p) {
    if (sc.seen(t, p)) return;
    if (++sc.expanded > kMaxStepPairs) too_ambiguous("more than " + std::to_string(kMaxStepPairs) + " parses at one byte");
    sc.work.push_back({t, p});
  };
  enqueue(node, parent);
  while (!sc.work.empty()) {
    const auto [t, p] = sc.work.back();
    sc.work.pop_back();
    for (uint32_t m : g.closure(t)) {
      if (!g.edges(m).empty()) sc.tops.push_back(frame(m, p));
      for (const Grammar::Call& c : g.calls(m)) enqueue(g.rule_start(c.rule), g.is_tail(c.ret) ? p : frame(c.ret, p));
      if (g.is_final(m)) {
        if (p == kRootFrame)
          sc.flags |= kCanEnd;
        else if (p == kUnknownFrame)
          sc.flags |= kLeftContext;
        else
          enqueue(frames_[p].node, frames_[p].parent);
      }
    }
  }
}

bool Matcher::Scratch::seen(uint32_t node, uint32_t parent) {
  const uint64_t key = (uint64_t(node) << 32) | parent;
  // Closures are a handful of pairs except in grammars with huge alternations, where a
  // hash set takes over from the linear scan.
  if (visited_big.empty()) {
    if (std::find(visited.begin(), visited.end(), key) != visited.end()) return true;
    visited.push_back(key);
    if (visited.size() > 64) visited_big.insert(visited.begin(), visited.end());
    return false;
  }
  return !visited_big.insert(key).second;
}

void Matcher::Scratch::reset() {
  tops.clear();
  work.clear();
  visited.clear();
  if (!visited_big.empty()) visited_big = {};
  flags = 0;
  expanded = 0;
}

uint32_t Matcher::intern_state() {
  Scratch& sc = scratch_;
  std::sort(sc.tops.begin(), sc.tops.end());
  sc.tops.erase(std::unique(sc.tops.begin(), sc.tops.end()), sc.tops.end());
  if (sc.tops.empty() && sc.flags == 0) return MatchState::kDeadId;
  if (sc.tops.size() > kMaxTops) too_ambiguous("more than " + std::to_string(kMaxTops) + " parses at once");
  std::string key(1, char(sc.flags));
  key.append(reinterpret_cast<const char*>(sc.tops.data()), sc.tops.size() * sizeof(uint32_t));
  auto [it, added] = state_index_.try_emplace(std::move(key), uint32_t(states_.size()));
  if (added) {
    StateInfo info;
    info.tops_begin = uint32_t(tops_.size());
    info.tops_count = uint32_t(sc.tops.size());
    info.flags = sc.flags;
    tops_.insert(tops_.end(), sc.tops.begin(), sc.tops.end());
    states_.push_back(info);
  }
  return it->second;
}

const uint32_t* Matcher::row(MatchState s) { return mutable_row(s.id); }

uint32_t* Matcher::mutable_row(uint32_t state) {
  StateInfo& info = states_[state];
  if (!info.row) {
    rows_.push_back(std::make_unique<uint32_t[]>(256));
    std::fill_n(rows_.back().get(), 256, kUnknown);
    info.row = rows_.back().get();
  }
  return info.row;
}

uint32_t Matcher::step(uint32_t state, uint8_t b) {
  scratch_.reset();
  const Grammar& g = *grammar_;
  const StateInfo info = states_[state];  // a copy: interning below may grow states_
  for (uint32_t k = 0; k < info.tops_count; ++k) {
    const Frame f = frames_[tops_[info.tops_begin + k]];
    for (const Grammar::Edge& e : g.edges(f.node))
      if (e.lo <= b && b <= e.hi) close(e.target, f.parent);
  }
  const uint32_t next = intern_state();
  mutable_row(state)[b] = next;
  return next;
}

std::array<uint64_t, 4> Matcher::next_bytes(MatchState s) const {
  std::array<uint64_t, 4> bits{};
  if (s.dead()) return bits;
  const StateInfo& info = states_[s.id];
  for (uint32_t k = 0; k < info.tops_count; ++k)
    for (const Grammar::Edge& e : grammar_->edges(frames_[tops_[info.tops_begin + k]].node))
      for (unsigned c = e.lo; c <= e.hi; ++c) bits[c >> 6] |= uint64_t(1) << (c & 63);
  return bits;
}

std::string Matcher::forced_bytes(MatchState s, size_t max_bytes) {
  std::string out;
  while (out.size() < max_bytes && !s.dead() && !can_end(s)) {
    const auto bits = next_bytes(s);
    int count = 0, byte = -1;
    for (int w = 0; w < 4; ++w) {
      count += std::popcount(bits[w]);
      if (bits[w]) byte = w * 64 + std::countr_zero(bits[w]);
    }
    if (count != 1) break;
    out += char(byte);
    s = accept_byte(s, uint8_t(byte));
  }
  return out;
}

MatchState Matcher::context_free(uint32_t node) {
  scratch_.reset();
  scratch_.tops.push_back(frame(node, kUnknownFrame));
  return {intern_state()};
}

void Matcher::top_nodes(MatchState s, std::vector<uint32_t>& out) const {
  if (s.dead()) return;
  const StateInfo& info = states_[s.id];
  for (uint32_t k = 0; k < info.tops_count; ++k) out.push_back(frames_[tops_[info.tops_begin + k]].node);
}

size_t Matcher::memory_bytes() const {
  return frames_.size() * (sizeof(Frame) + 32) + states_.size() * (sizeof(StateInfo) + 64) +
         tops_.size() * sizeof(uint32_t) + rows_.size() * 256 * sizeof(uint32_t);
}

}  // namespace flashspec::grammar
