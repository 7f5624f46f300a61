#include "offload/expert_cache.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flashspec {

namespace {
constexpr size_t kDecayTable = 4096;  // passes after which a count is taken as gone (0.5^93)
}  // namespace

ExpertCache::ExpertCache(int64_t n_layers, int64_t experts, int64_t staging_slots, int64_t cache_slots_per_layer,
                         bool shared_slots)
    : n_layers_(n_layers), experts_(experts), shared_(shared_slots) {
  if (n_layers < 1 || experts < 1 || staging_slots < 1 || cache_slots_per_layer < 0)
    throw Error("internal: expert cache of " + std::to_string(staging_slots) + " staging slots for " +
                std::to_string(n_layers) + " layers of " + std::to_string(experts) + " experts");
  slots_.resize(size_t(staging_slots + cache_slots_per_layer * n_layers));
  // Free lists are stacks; pushed in reverse so that slot 0 is used first.
  for (int32_t s = int32_t(slots_.size()) - 1; s >= 0; --s) {
    Slot& x = slots_[size_t(s)];
    x.cache = s >= staging_slots;
    (x.cache ? spare_ : free_staging_).push_back(s);
  }
  where_.assign(size_t(n_layers * experts), -1);
  score_.assign(size_t(n_layers * experts), 0.0);
  stamp_.assign(size_t(n_layers * experts), 0);
  passes_.assign(size_t(n_layers), 0);
  cached_.resize(size_t(n_layers));
  quota_.assign(size_t(n_layers), cache_slots_per_layer);
  layer_routed_.assign(size_t(n_layers), 0);
  layer_hits_.assign(size_t(n_layers), 0);
  decay_pow_.resize(kDecayTable);
  for (size_t n = 0; n < kDecayTable; ++n) decay_pow_[n] = std::pow(kDecay, double(n));
}

double ExpertCache::score(int64_t layer, int32_t e) const {
  const size_t k = key(layer, e);
  const size_t age = size_t(passes_[size_t(layer)] - stamp_[k]);
  return age < kDecayTable ? score_[k] * decay_pow_[age] : 0.0;
}

bool ExpertCache::is_cached(int64_t layer, int32_t e) const {
  const int32_t s = where_[key(layer, e)];
  return s >= 0 && slots_[size_t(s)].cache;
}

void ExpertCache::route(int64_t layer, std::span<const int32_t> experts) {
  if (layer < 0 || layer >= n_layers_) throw Error("internal: expert cache has no layer " + std::to_string(layer));
  if (shared_ && layer == 0) move_slot();
  const int64_t pass = ++passes_[size_t(layer)];
  for (int32_t e : experts) {
    if (e < 0 || e >= experts_) throw Error("internal: expert " + std::to_string(e) + " out of range");
    const size_t k = key(layer, e);
    score_[k] = score(layer, e) + 1.0;
    stamp_[k] = pass;
    ++layer_routed_[size_t(layer)];
    const int32_t s = where_[k];
    if (s >= 0) {
      Slot& x = slots_[size_t(s)];
      if (x.cache) ++hits_, ++layer_hits_[size_t(layer)];
      if (x.guess) {
        ++guess_hits_;
        decide_guess(x.rank, true);
      }
      x.guess = false;
      x.held = true;
      continue;
    }
    pending_.push_back(Read{-1, layer, e});
  }
  // Guesses for this layer it did not route to are wrong: their slots go back.
  guesses_.clear();
  for (int32_t s = 0; s < int32_t(slots_.size()); ++s)
    if (slots_[size_t(s)].guess) drop_guess(s);
}

void ExpertCache::guess(int64_t layer, std::span<const int32_t> experts) {
  if (layer < 0 || layer >= n_layers_) throw Error("internal: expert cache has no layer " + std::to_string(layer));
  guesses_.clear();
  for (int32_t s = 0; s < int32_t(slots_.size()); ++s)
    if (slots_[size_t(s)].guess && slots_[size_t(s)].layer != layer) drop_guess(s);
  for (size_t i = experts.size(); i-- > 0;) {  // read in the given order
    const int32_t e = experts[i];
    if (e < 0 || e >= experts_) throw Error("internal: expert " + std::to_string(e) + " out of range");
    if (where_[key(layer, e)] < 0) guesses_.push_back(Read{-1, layer, e, true, int32_t(i)});
  }
}

void ExpertCache::decide_guess(int32_t rank, bool routed) {
  if (rank < 0) return;
  if (size_t(rank) >= rank_reads_.size()) rank_reads_.resize(size_t(rank) + 1, 0), rank_hits_.resize(size_t(rank) + 1, 0);
  ++rank_reads_[size_t(rank)];
  rank_hits_[size_t(rank)] += routed;
}

int64_t ExpertCache::sure_guesses(double rate, int64_t samples) const {
  int64_t n = 0;
  for (; n < experts_; ++n) {
    const size_t r = size_t(n);
    if (r >= rank_reads_.size() || rank_reads_[r] < samples) continue;  // not measured yet: read it
    if (double(rank_hits_[r]) < rate * double(rank_reads_[r])) break;
  }
  return n;
}

void ExpertCache::drop_guess(int32_t slot) {
  Slot& x = slots_[size_t(slot)];
  decide_guess(x.rank, false);
  x.guess = false;
  if (x.state == State::Reading) {
    x.orphan = true;
    if (where_[key(x.layer, x.expert)] == slot) where_[key(x.layer, x.expert)] = -1;
  } else {
    free_staging(slot);
  }
}

std::optional<ExpertCache::Read> ExpertCache::next_read() {
  if (!can_read()) return std::nullopt;
  const bool guessed = pending_.empty();
  Read r;
  if (guessed) {
    r = guesses_.back();
    guesses_.pop_back();
  } else {
    r = pending_[pending_head_++];
    if (pending_head_ == pending_.size()) {
      pending_.clear();
      pending_head_ = 0;
    }
  }
  r.slot = free_staging_.back();
  r.guess = guessed;
  free_staging_.pop_back();
  Slot& x = slots_[size_t(r.slot)];
  x.state = State::Reading;
  x.held = !guessed;
  x.guess = guessed;
  x.rank = guessed ? r.rank : -1;
  x.orphan = false;
  x.layer = r.layer;
  x.expert = r.expert;
  where_[key(r.layer, r.expert)] = r.slot;
  ++(guessed ? guessed_ : reads_);
  return r;
}

void ExpertCache::landed(int32_t slot) {
  Slot& x = slots_.at(size_t(slot));
  if (x.state != State::Reading) return;  // cancelled meanwhile
  if (x.orphan) return free_staging(slot);
  x.state = State::Ready;
}

int32_t ExpertCache::ready_slot(int64_t layer, int32_t e) const {
  const int32_t s = where_[key(layer, e)];
  return s >= 0 && slots_[size_t(s)].state == State::Ready ? s : -1;
}

bool ExpertCache::awaited(int64_t layer, int32_t e) const {
  if (layer < 0 || layer >= n_layers_ || e < 0 || e >= experts_) return false;
  if (where_[key(layer, e)] >= 0) return true;
  for (size_t i = pending_head_; i < pending_.size(); ++i)
    if (pending_[i].layer == layer && pending_[i].expert == e) return true;
  return false;
}

void ExpertCache::free_staging(int32_t slot) {
  Slot& x = slots_[size_t(slot)];
  if (x.layer >= 0 && where_[key(x.layer, x.expert)] == slot) where_[key(x.layer, x.expert)] = -1;
  x = Slot{};
  free_staging_.push_back(slot);
}

void ExpertCache::done(int64_t layer, int32_t e) {
  const int32_t s = where_[key(layer, e)];
  if (s < 0) return;
  Slot& x = slots_[size_t(s)];
  if (!x.held || x.state != State::Ready) return;  // not this pass's (a stray call)
  x.held = false;
  if (x.cache) return;
  std::vector<int32_t>& mine = cached_[size_t(layer)];
  if (int64_t(mine.size()) < quota_[size_t(layer)] && !spare_.empty()) {
    // An empty cache slot takes over the staging role; the expert stays where it is.
    const int32_t t = spare_.back();
    spare_.pop_back();
    slots_[size_t(t)].cache = false;
    free_staging_.push_back(t);
    x.cache = true;
    mine.push_back(s);
    return;
  }
  const int32_t victim = victim_for(layer, score(layer, e));
  if (victim < 0) return free_staging(s);
  for (int32_t& c : mine)
    if (c == victim) c = s;
  x.cache = true;
  Slot& v = slots_[size_t(victim)];
  v.cache = false;
  free_staging(victim);
}

int32_t ExpertCache::victim_for(int64_t layer, double wanted) const {
  int32_t victim = -1;
  double least = 0;
  for (int32_t c : cached_[size_t(layer)]) {
    const Slot& y = slots_[size_t(c)];
    if (y.held) continue;
    const double sc = score(layer, y.expert);
    if (victim < 0 || sc < least) victim = c, least = sc;
  }
  return victim >= 0 && wanted > least ? victim : -1;
}

void ExpertCache::move_slot() {
  // Scores compare across layers only when every layer has seen as many passes.
  for (int64_t l = 1; l < n_layers_; ++l)
    if (passes_[size_t(l)] != passes_[0]) return;
  int64_t from = -1, to = -1;
  int32_t from_slot = -1;
  double least = 0, most = 0;
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int32_t c : cached_[size_t(l)]) {
      const Slot& y = slots_[size_t(c)];
      if (y.held || y.state != State::Ready) continue;
      const double sc = score(l, y.expert);
      if (from_slot < 0 || sc < least) from = l, from_slot = c, least = sc;
    }
    for (int32_t e = 0; e < experts_; ++e) {
      if (is_cached(l, e)) continue;
      const double sc = score(l, e);
      if (to < 0 || sc > most) to = l, most = sc;
    }
  }
  if (from_slot < 0 || to < 0 || from == to || !(most >= least + 1.0)) return;
  // The slot keeps its cache role, emptied, for `to` to fill with its next read.
  std::vector<int32_t>& theirs = cached_[size_t(from)];
  theirs.erase(std::find(theirs.begin(), theirs.end(), from_slot));
  Slot& x = slots_[size_t(from_slot)];
  where_[key(x.layer, x.expert)] = -1;
  x = Slot{};
  x.cache = true;
  spare_.push_back(from_slot);
  --quota_[size_t(from)];
  ++quota_[size_t(to)];
}

void ExpertCache::abandon(int64_t layer) {
  pending_.clear();
  pending_head_ = 0;
  if (!guesses_.empty() && guesses_.back().layer != layer) guesses_.clear();
  for (int32_t s = 0; s < int32_t(slots_.size()); ++s) {
    Slot& x = slots_[size_t(s)];
    if (x.guess) {
      if (x.layer != layer) drop_guess(s);
    } else if (x.cache) {
      x.held = false;
    } else if (x.state == State::Reading) {
      x.held = false;
      x.orphan = true;
      if (where_[key(x.layer, x.expert)] == s) where_[key(x.layer, x.expert)] = -1;
    } else if (x.state == State::Ready) {
      free_staging(s);
    }
  }
}

void ExpertCache::cancel_reads() {
  for (int32_t s = 0; s < int32_t(slots_.size()); ++s)
    if (!slots_[size_t(s)].cache && slots_[size_t(s)].state == State::Reading) free_staging(s);
}

}  // namespace flashspec
