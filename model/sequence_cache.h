#pragma once
// Everything one model keeps of one sequence: the KV cache of its attention layers (the
// windowed ones in a ring of their own where the model has both kinds), and the state of
// its recurrent layers where it has any, committed, rolled back and truncated together
// through the one SequenceState interface.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "model/sequence_state.h"

namespace flashspec {

class SequenceCache final : public SequenceState {
 public:
  // `slots`: per layer, its rows' index among kv's layers (recurrent layers: -1).
  SequenceCache(KvCache kv, std::vector<int32_t> slots) : kv_(std::move(kv)), slots_(std::move(slots)) {}
  // With a ring for the windowed layers, whose slots are `~index` among the ring's layers.
  SequenceCache(KvCache kv, KvCache ring, std::vector<int32_t> slots)
      : kv_(std::move(kv)), ring_(std::move(ring)), slots_(std::move(slots)) {}

  // The attention layers' rows (paged or not; the global layers' where there is a ring):
  // what a shared prefix is taken from.
  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }
  // The windowed layers' ring, or null.
  const KvCache* ring() const { return ring_ ? &*ring_ : nullptr; }
  // Where attention layer l's rows are: the cache, and l's index among its layers.
  const KvCache& kv_of(int64_t l, int64_t& slot) const {
    const int32_t s = slots_.at(size_t(l));
    slot = s < 0 && ring_ ? ~s : s;
    return s < 0 && ring_ ? *ring_ : kv_;
  }
  int64_t capacity() const { return kv_.capacity(); }
  // Error unless a token tree's pending rows and T more fit (a ring's slack).
  void check_tree_room(int64_t T) const {
    if (ring_) ring_->check_tree_room(T);
  }
  // Bytes of keys and values held (a paged cache's blocks not counted).
  uint64_t kv_bytes() const { return kv_.bytes() + (ring_ ? ring_->bytes() : 0); }
  // The recurrent layers' state (hybrid models), or null.
  void set_recurrent(std::unique_ptr<RecurrentState> r) { recurrent_ = std::move(r); }
  RecurrentState* recurrent() { return recurrent_.get(); }

  int64_t committed() const override { return kv_.committed(); }
  int64_t pending() const override { return kv_.pending(); }
  void prepare_rows(int64_t T) override {
    each([&](SequenceState& s) { s.prepare_rows(T); });
  }
  void add_pending(int64_t T) override {
    each([&](SequenceState& s) { s.add_pending(T); });
  }
  void commit(std::span<const int64_t> kept, int64_t still_pending = 0) override {
    each([&](SequenceState& s) { s.commit(kept, still_pending); });
  }
  void commit_first(int64_t n) override {
    each([&](SequenceState& s) { s.commit_first(n); });
  }
  int64_t truncate(int64_t n) override {
    // Each may only go back further (a recurrent state to a checkpoint, a ring to 0):
    // until they agree.
    for (;;) {
      int64_t m = n;
      if (recurrent_) m = recurrent_->truncate(m);
      if (ring_) m = ring_->truncate(m);
      if (m == n) break;
      n = m;
    }
    return kv_.truncate(n);
  }

 private:
  template <class F>
  void each(F f) {
    f(kv_);
    if (ring_) f(*ring_);
    if (recurrent_) f(*recurrent_);
  }

  KvCache kv_;
  std::optional<KvCache> ring_;
  std::vector<int32_t> slots_;
  std::unique_ptr<RecurrentState> recurrent_;
};

}  // namespace flashspec
