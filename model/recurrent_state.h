#pragma once
// What one sequence keeps for the recurrent (Gated DeltaNet) layers of one model: per
// layer, the convolution's last inputs and the heads' states at the committed position,
// and how to get the state at any pending row (kernels/delta_net.h computes them).
//
// A pass's rows come in two kinds:
// - a causal run (a prompt, a decoded token, the draft's catch-up): only its end state is
//   kept (the *anchor*), which the next run continues from and a commit of the whole
//   run adopts without copying;
// - a token tree (any masked batch: a draft tree, a chain, a draft level): every row
//   keeps a record (its convolution input, normalised key, delta and decays, bytes_per_row
//   per layer), from which the state at any node is rebuilt by replaying the rows on its
//   path, bit for bit as the pass computed it. A commit replays the accepted path;
//   rejected branches leave nothing behind.
// truncate() can go back to any position since the commit before the last (a stop
// inside an accepted path) or to 0; elsewhere it goes back to 0 and says so.
//
// States and records live in the backend's memory and change there alone (delta_net,
// delta_replay, copies), so on a GPU they never cross to the host; only a prefix
// checkpoint taken or restored does.
#include <cstdint>
#include <span>
#include <vector>

#include "core/model_config.h"
#include "kernels/backend_buffer.h"
#include "kernels/delta_net.h"
#include "model/sequence_state.h"

namespace flashspec {

class RecurrentState final : public SequenceState {
 public:
  // be holds the states; it outlives this.
  RecurrentState(const ModelConfig& c, Backend& be);

  // Full states a sequence holds per layer: committed, the one before the last commit
  // (truncate), and the end of the last causal run (anchor).
  static constexpr uint64_t kHeldStates = 3;

  // Floats of one layer's state (window and heads) and of one row's record per layer.
  static int64_t state_floats(const DeltaNetShape& d) { return d.window_floats() + d.state_floats(); }
  static int64_t record_floats(const DeltaNetShape& d) {
    return d.conv_dim() + d.key_dim() + d.value_dim() + d.v_heads;
  }

  // Backend memory one sequence's states take at most when its passes carry trees of up
  // to `tree_rows` rows: the held states and the spare; the starts one call rebuilds (one
  // per distinct parent before the pass: at most a row each); per layer the records of
  // the pending rows and of the last commit, each grown by doubling (a capacity of at
  // most twice the rows, and while growing the old room beside the new).
  static uint64_t backend_bytes(const ModelConfig& c, int64_t tree_rows);

  int64_t committed() const override { return committed_; }
  int64_t pending() const override { return int64_t(parent_.size()); }
  void prepare_rows(int64_t) override {}
  void add_pending(int64_t T) override;
  void commit(std::span<const int64_t> kept, int64_t still_pending = 0) override;
  void commit_first(int64_t n) override;
  int64_t truncate(int64_t n) override;

  // The next pass's rows: each one's parent (a pending row or -1: the committed position),
  // and whether they are a causal run. Then, per recurrent layer in order, fill_call()
  // sets a call's state fields and end_call() follows the call.
  void begin_rows(std::span<const int32_t> parents, bool causal);
  void fill_call(int64_t layer, DeltaNetCall& call);
  void end_call(int64_t layer);

  // Shared prefixes (engine/recurrent_prefixes.h). A causal run passing these positions
  // keeps the state after each too; take_checkpoints() hands out those computed so far
  // (position, one snapshot of every layer) and forgets them.
  void request_checkpoints(std::vector<int64_t> positions);
  std::vector<std::pair<int64_t, std::vector<float>>> take_checkpoints();
  // A fresh sequence starts at position pos of a snapshot taken there.
  void restore(std::span<const float> snapshot, int64_t pos);
  int64_t snapshot_floats() const { return int64_t(layers_.size()) * state_floats(shape_); }

 private:
  using Snapshot = BackendBuffer;  // window (conv_kernel - 1 rows) then the heads' states
  // Rows' records: each row's convolution input, normalised key, delta and decays, as
  // replay() reads them.
  struct Records {
    BackendBuffer inputs, keys, deltas, decays;
    int64_t capacity = 0;  // rows
    // Room for `rows` rows (what is there stays).
    void resize(Backend& be, const DeltaNetShape& d, int64_t rows);
    // Row `from` of `src` becomes row `to` here (src may be this, from >= to).
    void copy_row(Backend& be, const DeltaNetShape& d, const Records& src, int64_t from, int64_t to);
  };
  struct Layer {
    Snapshot committed, prev, anchor;
    std::vector<Snapshot> checks;  // one per requested checkpoint
    Records pending;  // of the pending rows
    Records last;     // of the last commit's rows, in path order (truncate)
  };
  float* window(const Snapshot& s) const { return s.get<float>(); }
  float* heads(const Snapshot& s) const { return s.get<float>() + shape_.window_floats(); }
  size_t snapshot_bytes() const { return size_t(state_floats(shape_)) * sizeof(float); }
  // s allocated (its contents undefined); every layer's committed state zero.
  void ensure(Snapshot& s);
  void zero_committed();
  // Applies records `rows` of `r` (a layer's pending records or its last commit's) to
  // `s`, in order.
  void replay(Snapshot& s, const Records& r, std::span<const int64_t> rows);
  // fill_call's parts: the call's parents and start states; a causal run's end state and
  // checkpoints; a tree's records.
  void set_starts(Layer& L, DeltaNetCall& call);
  void set_causal_outputs(Layer& L, DeltaNetCall& call);
  void set_records(Layer& L, DeltaNetCall& call);
  // commit's parts: the path becomes committed (prev keeps the state before it); the
  // rows kept pending move down, `end` (the path's last, or -1) their new committed parent.
  void commit_path(std::span<const int64_t> path);
  void keep_pending(std::span<const int64_t> rows, int64_t end);
  // The state after pending row `row` into `out`: from the anchor or the committed
  // state, replaying the recorded rows between.
  void materialize(Layer& L, int64_t row, Snapshot& out);
  void reset();

  Backend& be_;
  DeltaNetShape shape_;
  std::vector<Layer> layers_;  // the recurrent layers, in order
  int64_t committed_ = 0;
  int64_t prev_pos_ = -1;      // where each layer's prev is (-1: none)
  int64_t last_rows_ = 0;      // rows of the last commit with records in last_* (from prev_pos_)
  std::vector<int32_t> parent_;   // per pending row
  std::vector<uint8_t> recorded_;
  int64_t anchor_row_ = -1;    // the pending row whose state `anchor` holds (-1: none)
  // The pass in progress (begin_rows .. add_pending).
  std::vector<int32_t> rows_parent_;
  bool rows_causal_ = false;
  Snapshot spare_;  // one layer's snapshot, rotated through the layers' end states
  std::vector<int64_t> checkpoints_;     // requested positions
  std::vector<uint8_t> checkpoint_done_;
  std::vector<int64_t> call_mid_rows_;  // a call's checkpoint rows and where they go
  std::vector<float*> call_mid_windows_, call_mid_states_;
  std::vector<Snapshot> starts_;  // materialised starts of one call
  std::vector<int32_t> call_parent_;
  std::vector<const float*> start_windows_, start_states_;
};

}  // namespace flashspec
