#include "model/recurrent_state.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

RecurrentState::RecurrentState(const ModelConfig& c, Backend& be) : be_(be), shape_(c.delta) {
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (!c.recurrent(l)) continue;
    Layer L;
    ensure(L.committed);
    ensure(L.prev);  // (read only once a commit or a causal run has written them)
    ensure(L.anchor);
    layers_.push_back(std::move(L));
  }
  ensure(spare_);
  zero_committed();
}

uint64_t RecurrentState::backend_bytes(const ModelConfig& c, int64_t tree_rows) {
  if (!c.hybrid()) return 0;
  const uint64_t layers = uint64_t(c.n_layers - c.attention_layers());
  const uint64_t state = uint64_t(state_floats(c.delta)) * sizeof(float);
  const uint64_t record = uint64_t(record_floats(c.delta)) * sizeof(float);
  const uint64_t rows = uint64_t(std::max<int64_t>(tree_rows, 0));
  // Pending records: 3 rows' room per row at their growth's peak; the last commit's: 2.
  return (kHeldStates * layers + 1 + rows) * state + 5 * rows * layers * record;
}

void RecurrentState::ensure(Snapshot& s) {
  if (s.size() != snapshot_bytes()) s = Snapshot(be_, snapshot_bytes());
}

void RecurrentState::zero_committed() {
  // A sequence starts from zero states, as llama.cpp's.
  const std::vector<float> zeros(size_t(state_floats(shape_)), 0.0f);
  for (Layer& L : layers_) be_.upload(L.committed.get(), zeros.data(), snapshot_bytes());
}

void RecurrentState::reset() {
  zero_committed();
  committed_ = 0;
  prev_pos_ = -1;
  last_rows_ = 0;
  parent_.clear();
  recorded_.clear();
  anchor_row_ = -1;
}

void RecurrentState::begin_rows(std::span<const int32_t> parents, bool causal) {
  rows_parent_.assign(parents.begin(), parents.end());
  rows_causal_ = causal;
  const int64_t P = pending();
  for (size_t i = 0; i < parents.size(); ++i)
    if (parents[i] >= P + int64_t(i)) throw Error("internal: a recurrent row's parent comes after it");
}

void RecurrentState::Records::resize(Backend& be, const DeltaNetShape& d, int64_t rows) {
  if (rows <= capacity) return;
  // Doubling, so that trees growing by a level at a time reallocate rarely; the rows
  // there move to the new room inside backend memory.
  const int64_t cap = std::max(rows, 2 * capacity);
  auto grow = [&](BackendBuffer& b, int64_t w) {
    BackendBuffer bigger(be, size_t(cap * w) * sizeof(float));
    if (capacity) be.copy(bigger.get(), b.get(), size_t(capacity * w) * sizeof(float));
    b = std::move(bigger);
  };
  grow(inputs, d.conv_dim());
  grow(keys, d.key_dim());
  grow(deltas, d.value_dim());
  grow(decays, d.v_heads);
  capacity = cap;
}

void RecurrentState::Records::copy_row(Backend& be, const DeltaNetShape& d, const Records& src, int64_t from,
                                       int64_t to) {
  if (&src == this && from == to) return;
  auto row = [&](const BackendBuffer& a, BackendBuffer& b, int64_t w) {
    be.copy(b.get<float>() + to * w, a.get<float>() + from * w, size_t(w) * sizeof(float));
  };
  row(src.inputs, inputs, d.conv_dim());
  row(src.keys, keys, d.key_dim());
  row(src.deltas, deltas, d.value_dim());
  row(src.decays, decays, d.v_heads);
}

void RecurrentState::replay(Snapshot& s, const Records& r, std::span<const int64_t> rows) {
  if (rows.empty()) return;
  be_.delta_replay({.shape = shape_,
                    .snapshot = s.get<float>(),
                    .inputs = r.inputs.get<float>(),
                    .keys = r.keys.get<float>(),
                    .deltas = r.deltas.get<float>(),
                    .decays = r.decays.get<float>(),
                    .rows = rows});
}

void RecurrentState::materialize(Layer& L, int64_t row, Snapshot& out) {
  std::vector<int64_t> path;  // newest first
  int64_t at = row;
  while (at >= 0 && at != anchor_row_) {
    if (!recorded_[size_t(at)])
      throw Error("internal: the recurrent state of a pending row without its record was asked for");
    path.push_back(at);
    at = parent_[size_t(at)];
  }
  ensure(out);
  be_.copy(out.get(), (at < 0 ? L.committed : L.anchor).get(), snapshot_bytes());
  std::reverse(path.begin(), path.end());
  replay(out, L.pending, path);
}

void RecurrentState::set_starts(Layer& L, DeltaNetCall& call) {
  // Starts: each distinct parent before the pass, in order of first use: the committed
  // state, the anchor, or a pending row's state rebuilt from its records.
  const int64_t P = pending(), n = int64_t(rows_parent_.size());
  std::vector<int32_t> start_rows;
  call_parent_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = rows_parent_[size_t(i)];
    if (p >= P) {
      call_parent_[size_t(i)] = p - int32_t(P);
      continue;
    }
    auto it = std::find(start_rows.begin(), start_rows.end(), p);
    if (it == start_rows.end()) it = start_rows.insert(start_rows.end(), p);
    call_parent_[size_t(i)] = -1 - int32_t(it - start_rows.begin());
  }
  start_windows_.clear();
  start_states_.clear();
  starts_.resize(start_rows.size());
  for (size_t s = 0; s < start_rows.size(); ++s) {
    Snapshot* snap = nullptr;
    if (start_rows[s] < 0) {
      snap = &L.committed;
    } else if (start_rows[s] == anchor_row_) {
      snap = &L.anchor;
    } else {
      materialize(L, start_rows[s], starts_[s]);
      snap = &starts_[s];
    }
    start_windows_.push_back(window(*snap));
    start_states_.push_back(heads(*snap));
  }
  call.parent = call_parent_.data();
  call.start_window = start_windows_;
  call.start_state = start_states_;
}

void RecurrentState::set_causal_outputs(Layer& L, DeltaNetCall& call) {
  // Only the run's end is kept, in the spare (then the anchor), and any checkpoint it passes.
  call.end_window = window(spare_);
  call.end_state = heads(spare_);
  const int64_t first = committed_ + pending(), n = call.T;  // the position of the call's first row
  call_mid_rows_.clear();
  call_mid_windows_.clear();
  call_mid_states_.clear();
  L.checks.resize(checkpoints_.size());
  for (size_t m = 0; m < checkpoints_.size(); ++m) {
    if (checkpoints_[m] <= first || checkpoints_[m] > first + n) continue;
    ensure(L.checks[m]);
    call_mid_rows_.push_back(checkpoints_[m] - first - 1);
    call_mid_windows_.push_back(window(L.checks[m]));
    call_mid_states_.push_back(heads(L.checks[m]));
  }
  call.mid_rows = call_mid_rows_;
  call.mid_windows = call_mid_windows_;
  call.mid_states = call_mid_states_;
}

void RecurrentState::set_records(Layer& L, DeltaNetCall& call) {
  const DeltaNetShape& d = shape_;
  const int64_t P = pending();
  L.pending.resize(be_, d, P + call.T);
  call.inputs = L.pending.inputs.get<float>() + P * d.conv_dim();
  call.keys = L.pending.keys.get<float>() + P * d.key_dim();
  call.deltas = L.pending.deltas.get<float>() + P * d.value_dim();
  call.decays = L.pending.decays.get<float>() + P * d.v_heads;
}

void RecurrentState::fill_call(int64_t layer, DeltaNetCall& call) {
  Layer& L = layers_.at(size_t(layer));
  if (call.T != int64_t(rows_parent_.size())) throw Error("internal: a recurrent call's rows differ from the pass's");
  set_starts(L, call);
  if (rows_causal_)
    set_causal_outputs(L, call);
  else
    set_records(L, call);
}

void RecurrentState::end_call(int64_t layer) {
  if (rows_causal_) std::swap(layers_.at(size_t(layer)).anchor, spare_);
}

void RecurrentState::add_pending(int64_t T) {
  if (T != int64_t(rows_parent_.size())) throw Error("internal: recurrent rows added without their parents");
  const int64_t P = pending();
  parent_.insert(parent_.end(), rows_parent_.begin(), rows_parent_.end());
  recorded_.insert(recorded_.end(), size_t(T), rows_causal_ ? 0 : 1);
  if (rows_causal_ && T > 0) anchor_row_ = P + T - 1;
  for (size_t m = 0; m < checkpoints_.size(); ++m)
    if (rows_causal_ && checkpoints_[m] > committed_ + P && checkpoints_[m] <= committed_ + P + T)
      checkpoint_done_[m] = 1;
  rows_parent_.clear();
}

void RecurrentState::commit(std::span<const int64_t> kept, int64_t still_pending) {
  const int64_t n_c = int64_t(kept.size()) - still_pending;
  if (n_c < 0) throw Error("internal: more rows kept pending than kept");
  for (int64_t i = 0; i < int64_t(kept.size()); ++i) {
    if (kept[size_t(i)] < 0 || kept[size_t(i)] >= pending())
      throw Error("internal: committing a recurrent row that is not pending");
    if (i > 0 && kept[size_t(i)] <= kept[size_t(i - 1)]) throw Error("internal: kept rows out of order");
  }
  const std::span<const int64_t> path = kept.first(size_t(n_c));
  if (!path.empty()) commit_path(path);
  keep_pending(kept.subspan(size_t(n_c)), path.empty() ? -1 : path.back());
}

void RecurrentState::commit_path(std::span<const int64_t> path) {
  const int64_t n = int64_t(path.size());
  for (int64_t i = 0; i < n; ++i) {  // one path from the committed end
    const int32_t p = parent_[size_t(path[size_t(i)])];
    if (p != (i == 0 ? -1 : path[size_t(i - 1)]))
      throw Error("internal: committed recurrent rows are not a path from the committed position");
  }
  const int64_t end = path.back();
  bool all_recorded = true;
  for (int64_t r : path) all_recorded = all_recorded && recorded_[size_t(r)];
  const DeltaNetShape& d = shape_;
  for (Layer& L : layers_) {
    // The new committed state, then prev <- committed <- it.
    if (end == anchor_row_)
      std::swap(spare_, L.anchor);
    else
      materialize(L, end, spare_);
    std::swap(L.prev, L.committed);
    std::swap(L.committed, spare_);
    // The path's records, for a truncate into it.
    if (all_recorded) {
      L.last.resize(be_, d, n);
      for (int64_t i = 0; i < n; ++i) L.last.copy_row(be_, d, L.pending, path[size_t(i)], i);
    }
  }
  prev_pos_ = committed_;
  last_rows_ = all_recorded ? n : 0;
  committed_ += n;
}

void RecurrentState::keep_pending(std::span<const int64_t> rows, int64_t end) {
  // The rows staying pending move down, their parents renumbered (`end`, just
  // committed, becomes the committed position).
  std::vector<int32_t> parent;
  std::vector<uint8_t> recorded;
  int64_t anchor = -1;
  const DeltaNetShape& d = shape_;
  for (int64_t j = 0; j < int64_t(rows.size()); ++j) {
    const int64_t old = rows[size_t(j)];
    const int32_t p = parent_[size_t(old)];
    int32_t np = -1;
    if (p != end) {
      const auto it = std::find(rows.begin(), rows.begin() + j, p);
      if (it == rows.begin() + j) throw Error("internal: a recurrent row kept pending without its parent");
      np = int32_t(it - rows.begin());
    }
    parent.push_back(np);
    recorded.push_back(recorded_[size_t(old)]);
    if (old == anchor_row_) anchor = j;
    if (recorded_[size_t(old)])
      for (Layer& L : layers_) L.pending.copy_row(be_, d, L.pending, old, j);
  }
  parent_ = std::move(parent);
  recorded_ = std::move(recorded);
  anchor_row_ = anchor;
}

void RecurrentState::request_checkpoints(std::vector<int64_t> positions) {
  checkpoints_ = std::move(positions);
  checkpoint_done_.assign(checkpoints_.size(), 0);
}

std::vector<std::pair<int64_t, std::vector<float>>> RecurrentState::take_checkpoints() {
  std::vector<std::pair<int64_t, std::vector<float>>> out;
  for (size_t m = 0; m < checkpoints_.size(); ++m) {
    if (!checkpoint_done_[m]) continue;
    std::vector<float> snap(static_cast<size_t>(snapshot_floats()));
    const size_t n = size_t(state_floats(shape_));
    for (size_t l = 0; l < layers_.size(); ++l)
      be_.download(snap.data() + l * n, layers_[l].checks[m].get(), snapshot_bytes());
    out.emplace_back(checkpoints_[m], std::move(snap));
  }
  request_checkpoints({});
  return out;
}

void RecurrentState::restore(std::span<const float> snapshot, int64_t pos) {
  if (committed_ != 0 || pending() != 0) throw Error("internal: restoring a recurrent snapshot into a used sequence");
  if (int64_t(snapshot.size()) != snapshot_floats()) throw Error("internal: a recurrent snapshot of another shape");
  const size_t n = size_t(state_floats(shape_));
  for (size_t l = 0; l < layers_.size(); ++l)
    be_.upload(layers_[l].committed.get(), snapshot.data() + l * n, snapshot_bytes());
  committed_ = pos;
  prev_pos_ = -1;
  last_rows_ = 0;
}

void RecurrentState::commit_first(int64_t n) {
  std::vector<int64_t> kept(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) kept[size_t(i)] = i;
  commit(kept);
}

int64_t RecurrentState::truncate(int64_t n) {
  parent_.clear();
  recorded_.clear();
  anchor_row_ = -1;
  if (n >= committed_) return committed_;
  const bool reachable = n > 0 && prev_pos_ >= 0 && n >= prev_pos_ && n - prev_pos_ <= last_rows_;
  if (!reachable) {
    reset();
    return 0;
  }
  // From the state before the last commit, its first n - prev_pos_ rows again.
  std::vector<int64_t> rows(static_cast<size_t>(n - prev_pos_));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int64_t(i);
  for (Layer& L : layers_) {
    be_.copy(L.committed.get(), L.prev.get(), snapshot_bytes());
    replay(L.committed, L.last, rows);
  }
  last_rows_ = n - prev_pos_;
  committed_ = n;
  return n;
}

}  // namespace flashspec
