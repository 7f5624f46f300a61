#pragma once
// Layer weights for a backend that cannot read host memory (a GPU). The first
// `n_resident` layers are copied into backend memory once and stay there (--vram-budget);
// the others pass through a ring of two backend slots, copied from a host LayerSource
// (the mapping, or a weight stream's pinned buffers) on the backend's copy queue.
//
// Ordering, by the copy queue's events (kernels/backend.h), two per slot:
// - "free": recorded on the op queue at release(l), after the last op that reads the
//   slot layer l went into. The copy of the layer after next into that slot waits for it
//   and nothing else, so the copy of layer l+1 (into the other slot) overlaps the
//   compute of layer l.
// - "copied": recorded on the copy queue after a layer's copies; the layer's ops (issued
//   after acquire() returns) wait for it, and the host polls it to hand the host buffer
//   back to its source.
// Consecutive staged layers take the two slots in turn, across passes too. acquire()
// never waits for a copy to land unless the host source needs that buffer back first (a
// weight stream frees the layer it handed out at its next acquire: see host_holds).
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "model/layer_source.h"
#include "model/model_weights.h"

namespace flashspec {

class Model;

class StagedLayers final : public LayerSource {
 public:
  // How many layers acquired from the host source may still be unreleased when another is
  // acquired from it without the source reusing their buffers. A weight stream holds one
  // (its next acquire() recycles the layer it handed out, released or not); the mapping
  // never reuses anything.
  static constexpr int64_t kStreamHolds = 1;
  static constexpr int64_t kNeverRecycled = std::numeric_limits<int64_t>::max();

  // `host` serves layers n_resident.. (may be null when every layer is resident);
  // `vectors` is ModelWeights::vectors() in backend memory (PlacedWeights::vectors);
  // `host_holds` as above (the safe default fits any source).
  StagedLayers(const ModelWeights& w, const float* vectors, Backend& be,
               std::unique_ptr<LayerSource> host, int64_t n_resident, int64_t host_holds = kStreamHolds);

  // How many leading layers fit `budget` bytes of backend memory together with the two
  // ring slots the others need (all of them when they all fit without a ring).
  static int64_t resident_layers_for(const ModelWeights& w, uint64_t budget);
  // Backend memory one layer takes (its matrices, each 256-byte aligned).
  static uint64_t packed_bytes(const ModelWeights& w, int64_t layer);

  // Queues layer l's copy into a slot and returns its view there; ops issued from now on
  // read it only after it has landed.
  LayerWeights acquire(int64_t layer) override;
  // Called once layer l's ops have been issued: its slot is free once they finish.
  void release(int64_t layer) override;
  double wait_ms() const override { return host_ ? host_->wait_ms() : 0.0; }
  ExpertCounters expert_reads() const override { return host_ ? host_->expert_reads() : ExpertCounters{}; }

  int64_t n_resident() const { return int64_t(resident_.size()); }

 private:
  struct Slot {
    BackendBuffer buf;
    CopyQueue::Event free = 0, copied = 0;
    int64_t layer = -1;    // the layer it holds
    bool reading = false;  // acquired, not yet released: its ops may still be issued
  };
  struct HostLayer {  // acquired from the host source, its copy maybe still in flight
    int64_t layer;
    CopyQueue::Event copied;
  };

  LayerWeights view(int64_t layer, const BackendBuffer& buf) const;
  // Hands layers back to the host source, oldest first: waiting for their copies while
  // more than `keep` are held, then as long as the oldest one's copy has landed.
  void release_host(size_t keep);

  const ModelWeights& w_;
  const float* vectors_;
  std::unique_ptr<LayerSource> host_;
  int64_t host_holds_;
  // Backend memory before the queue: members die in reverse order, so the queue (which
  // waits for its copies, then unpins host_'s buffers) goes before the slots it writes
  // and before host_ frees the buffers it reads.
  std::vector<BackendBuffer> resident_;
  std::array<Slot, 2> slots_;
  std::unique_ptr<CopyQueue> queue_;
  int next_slot_ = 0;
  std::deque<HostLayer> host_held_;
};

// Every layer of `m` (a model on a backend with memory of its own) resident in that
// memory, copied there at its first forward: a GPU draft, or a target that fits.
void keep_layers_in_backend(Model& m);

}  // namespace flashspec
