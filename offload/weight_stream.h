#pragma once
// Streams the layers of a model file, pass after pass, through a ring of layer slots.
//
// As many layers as fit the RAM budget (after the ring), spread over the pass
// (offload/layer_plan.h), are read once at open into owned aligned memory and stay
// resident. The rest stream: an I/O thread owned by this object keeps the ring full in
// layer order, and at the last streamed layer wraps to the first streamed layer of the
// next pass, so the storage never idles between passes. While streamed layer l is
// computed, the next k-1 streamed layers are in flight (k = ring slots).
// acquire(l) blocks on a condition variable until l's bytes have landed; release(l)
// hands its slot back for the next read. An I/O error ends the I/O thread and is
// rethrown by every later acquire(). A layer acquired out of order (a pass abandoned
// midway) restarts the stream at that layer. At the start of each streamed pass the
// file is checked against what was opened: replaced, truncated or rewritten -> Error.
//
// Mixture-of-experts models (plan().experts): the ring carries the layers' dense parts,
// and the expert tensors are read expert by expert. After acquire(l), route(l, experts)
// names the experts the pass routed to; those not in the expert cache are queued, and
// the I/O thread reads them into staging slots ahead of any ring read not yet started
// (the pass is waiting for them; later layers' dense parts keep coming behind them).
// expert(l, e) blocks until e's slices have landed; done_with(l, e) hands the slot back
// to the cache policy (offload/expert_cache.h).
//
// Byte level only (no model types): the LayerSource for a llama model is
// target/streamed_layers.h.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/expert_cache.h"
#include "offload/file_identity.h"
#include "offload/layer_plan.h"
#include "offload/stream_counters.h"
#include "offload/uring_reader.h"

namespace flashspec {

// What the stream needs at run time: how to read (the reader's options: depth, request
// size, bandwidth cap, O_DIRECT, test hooks) and the file it was planned for. What it
// reads, and into how much memory, is the LayerPlan's (made by target/memory_plan.h for a
// model, or plan_layers for bare extents).
struct StreamOptions : ReaderOptions {
  uint64_t expected_file_size = 0;  // size when the model was opened (0: unchecked)
  // Mixture of experts (on unless a benchmark switches one off to measure it): read ahead
  // the guess ranks that are nearly always right even while storage is the bottleneck,
  // and let cache slots move to the layers that reuse experts most (offload/expert_cache.h).
  bool sure_guesses = true;
  bool shared_cache = true;
};

class WeightStream {
 public:
  // `layers`: per layer, the tensors to stream (expert tensors marked by their expert
  // count), read as `plan` (plan_layers of them) says. Reads the resident layers before
  // returning; Error on any I/O problem.
  WeightStream(const std::string& path, const std::vector<std::vector<TensorExtent>>& layers, LayerPlan plan,
               const StreamOptions& o);
  ~WeightStream();  // stops the I/O thread (mid-pass too), waits for reads in flight
  WeightStream(const WeightStream&) = delete;
  WeightStream& operator=(const WeightStream&) = delete;

  const LayerPlan& plan() const { return plan_; }
  bool direct() const { return reader_->direct(); }
  const std::string& path() const { return path_; }

  // Layer l's buffer: tensor i of the layer starts at buffer + plan().layers[l].tensor_offset[i].
  // Valid until release(l).
  const uint8_t* acquire(int64_t layer);
  void release(int64_t layer);

  // Mixture of experts (plan().experts set). `experts`: ascending, unique.
  void route(int64_t layer, std::span<const int32_t> experts);
  // Expert e's slot, once its slices have landed: slice i (of the layer's expert tensors,
  // plan().experts->tensors order) at slot + expert_slices(layer, e).slice_offset[i].
  // Valid until done_with(layer, e).
  const uint8_t* expert(int64_t layer, int32_t e);
  // Of routed `experts`, the index of one that has landed, waiting for the first to.
  size_t ready_among(int64_t layer, std::span<const int32_t> experts);
  // Experts `layer` will likely route to (unique, likeliest first), before it routes:
  // read ahead into free staging slots behind every routed read (offload/expert_cache.h,
  // guesses), as many as the storage's idle time has room for.
  void guess(int64_t layer, std::span<const int32_t> experts);
  // Layer `layer`'s dense part when it is resident (its bytes never move), else null.
  const uint8_t* resident_layer(int64_t layer) const;
  void done_with(int64_t layer, int32_t e);
  const ExpertSliceReads& expert_slices(int64_t layer, int32_t e) const {
    return slice_reads_[size_t(layer * plan_.experts->experts + e)];
  }
  // Experts of `layer` held in its cache slots now.
  int64_t cached_experts(int64_t layer) const;
  // Per expert of `layer`: 1 where a slot holds it or it is being read (cached, read for
  // this pass, or guessed ahead), so that routing to it starts no read.
  void held_experts(int64_t layer, std::span<uint8_t> held) const;

  StreamCounters counters() const;
  // The same without the per-layer expert counts, for the callers that read the counters
  // every pass (pass times, read progress): no per-layer copies on that path.
  StreamCounters totals() const;
  // Blocks until every expert read issued has landed, wrong guesses' included: the
  // counters' expert bytes (counted when issued) are then in bytes_read too.
  void wait_expert_reads();
  // Every buffer weights are read into (ring slots, resident layers, expert slots).
  std::vector<std::span<uint8_t>> buffers() const;

 private:
  struct Slot {
    AlignedBuffer buf;
    int64_t pos = -1;  // stream position it holds (or is being read for)
    int ranges_left = 0;
    bool ready = false;
  };
  using Clock = std::chrono::steady_clock;

  void io_loop();
  // The consumer's wait (counted as wait time) until `landed` holds; rethrows the I/O
  // thread's error, or throws when the stream stops first.
  void wait_until(std::unique_lock<std::mutex>& lk, const std::function<bool()>& landed);
  void fill_ring(std::unique_lock<std::mutex>& lk);
  // Queues the reads of routed experts that have a staging slot to go to.
  void issue_expert_reads();
  bool expert_reads_waiting() const { return experts_ && experts_->can_read(); }
  // Tags of expert reads (the ring's are stream positions, far below this bit).
  static constexpr uint64_t kExpertTag = uint64_t(1) << 62;
  int64_t n_streamed() const { return int64_t(plan_.layers.size()) - plan_.n_resident; }
  double ms(Clock::duration d) const { return std::chrono::duration<double, std::milli>(d).count(); }

  std::string path_;
  LayerPlan plan_;
  StreamOptions opt_;
  std::unique_ptr<UringReader> reader_;
  std::unique_ptr<FileIdentity> identity_;
  std::vector<AlignedBuffer> resident_;  // per layer (empty for a streamed one)
  std::vector<Slot> slots_;
  // Mixture of experts: the slots' memory and bookkeeping, per (layer, expert) where its
  // slices are read from and land, per slot the reads still in flight.
  std::optional<ExpertCache> experts_;
  AlignedBuffer expert_mem_;
  std::vector<ExpertSliceReads> slice_reads_;
  std::vector<int> expert_ranges_left_;
  std::vector<uint64_t> expert_slot_read_;  // per slot: bytes of the reads it is waiting for
  int64_t last_expert_layer_ = -1;

  mutable std::mutex mu_;
  std::condition_variable cv_consumer_, cv_io_;
  int64_t fill_pos_ = 0;     // next stream position the I/O thread will read
  int64_t consume_pos_ = 0;  // position the consumer holds or waits for
  int64_t freed_pos_ = 0;    // positions below this have been released
  int64_t resync_pos_ = -1;  // >= 0: restart the stream there
  bool holding_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  // Counters.
  uint64_t resident_read_ = 0;  // reader bytes from the resident load
  bool busy_ = false;
  Clock::time_point busy_since_{};
  double busy_ms_ = 0, wait_ms_ = 0, resident_ms_ = 0;
  // Guessed experts: how many the storage's idle time has room for (under mu_).
  size_t guess_room();
  static constexpr double kSureGuess = 0.9;          // a rank routed to this often is read ahead
  static constexpr int64_t kSureGuessSamples = 32;   // reads of a rank before its rate is trusted
  Clock::time_point last_guess_{};
  double busy_at_last_guess_ = 0, idle_ms_ = 0;
  uint64_t expert_read_bytes_ = 0;
  int64_t passes_ = 0;

  std::thread io_;  // last member: started when everything above exists
};

}  // namespace flashspec
