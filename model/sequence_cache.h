#pragma once
// Everything one model keeps of one sequence: the KV cache of its attention layers and
// the state of its recurrent layers where it has any, committed, rolled back and
// truncated together through the one SequenceState interface.
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "model/sequence_state.h"

namespace flashspec {

class SequenceCache final : public SequenceState {
 public:
  explicit SequenceCache(KvCache kv) : kv_(std::move(kv)) {}

  // The attention layers' rows (paged or not): what attention reads and writes, and what
  // a shared prefix is taken from.
  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }
  int64_t capacity() const { return kv_.capacity(); }
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
    if (recurrent_) n = recurrent_->truncate(n);  // it may only go back further
    return kv_.truncate(n);
  }

 private:
  template <class F>
  void each(F f) {
    f(kv_);
    if (recurrent_) f(*recurrent_);
  }

  KvCache kv_;
  std::unique_ptr<RecurrentState> recurrent_;
};

}  // namespace flashspec
