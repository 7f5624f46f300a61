#pragma once
// Which expert lives in which slot of a stream's expert memory, and which stay there
// between passes: the bookkeeping and the cache policy of expert-by-expert streaming,
// without I/O or locking (offload/weight_stream.cpp drives it under its mutex).
//
// Slots have one of two roles. Staging slots (a fixed number) receive the experts a pass
// routes to that are not held; cache slots (a fixed number per layer) keep a layer's hot
// experts between passes. When a pass is done with an expert it read, the policy decides
// whether it takes a cache slot of its layer: if the layer has one empty, or if it is
// used more than the least used expert cached there, whose slot then becomes a staging
// slot (roles swap; nothing is copied).
//
// "Used more" is frequency with recency: each expert's score is the number of passes of
// its layer that routed to it, each pass's count decaying by `decay` per later pass of
// the layer (an exponential moving count: an expert that was hot long ago loses to one
// that is hot now, and one busy pass does not outweigh steady use).
//
// Shared across layers (`shared_slots`), the number of cache slots a layer has moves with
// its routing: when a pass starts (every layer has then seen as many passes, so scores
// compare across layers), a slot moves from the layer whose least used cached expert is
// least used to the layer whose most used uncached expert is most used, if that one was
// used at least once more. A layer that reuses experts gains slots from one that routes
// nearly uniformly (whose slots hit little). One slot per pass: a moved slot's expert is
// dropped, and a wrong move costs a read.
//
// Guesses: while a pass runs layer l, the experts layer l + 1 will likely route to can be
// read ahead into free staging slots (behind every read the pass is waiting for). When
// layer l + 1 routes, each guess it routes to is taken as if read for it; the others are
// dropped (freed, or freed when they land). Only the layer a pass is about to reach has
// guesses: guessing again, or moving on to another layer, drops older ones. A guess has
// a rank, its place in the guessed order (likeliest first), and the cache counts how
// often each rank's reads were routed to: the stream reads ahead, even while storage is
// the bottleneck, the leading ranks that are nearly always right (sure_guesses()).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace flashspec {

class ExpertCache {
 public:
  static constexpr double kDecay = 1.0 - 1.0 / 64;  // per pass of a layer: half-life ~44 passes

  ExpertCache(int64_t n_layers, int64_t experts, int64_t staging_slots, int64_t cache_slots_per_layer,
              bool shared_slots = false);

  int64_t n_slots() const { return int64_t(slots_.size()); }

  // A pass of `layer` routes to `experts` (ascending, unique). Each one held (cached, or
  // already read or being read for this pass) is a hit and stays put until done(); the
  // others are misses, queued for reading in this order.
  void route(int64_t layer, std::span<const int32_t> experts);

  struct Read {
    int32_t slot;
    int64_t layer;
    int32_t expert;
    bool guess = false;  // read ahead, not yet routed to
    int32_t rank = -1;   // a guess's place in the guessed order
  };
  // Experts that a pass of `layer`, not yet routed, is likely to route to (unique): those
  // not held are queued for reading ahead, replacing any earlier guesses not yet read.
  void guess(int64_t layer, std::span<const int32_t> experts);

  // The next queued miss, else the next queued guess, and the free staging slot to read
  // it into (the slot is then being read); nullopt when nothing is queued or no staging
  // slot is free.
  std::optional<Read> next_read();
  bool can_read() const { return (!pending_.empty() || !guesses_.empty()) && !free_staging_.empty(); }
  // The slot's reads have landed.
  void landed(int32_t slot);
  // The slot holding (layer, e) once its bytes are there, else -1 (queued or being read).
  int32_t ready_slot(int64_t layer, int32_t e) const;
  // Whether (layer, e) is held, being read or queued: something a wait for it will see.
  bool awaited(int64_t layer, int32_t e) const;
  // The pass is done with (layer, e): it stays cached, or its slot becomes free.
  void done(int64_t layer, int32_t e);

  // The pass moves on to `layer` (a new layer, a new pass, a pass left midway after an
  // error or a stream restart): drops its queued misses and holds, and every guess but
  // those for `layer`. Slots being read stay busy until landed() or cancel_reads().
  void abandon(int64_t layer);
  // The reads in flight were cancelled: their slots are empty and free again.
  void cancel_reads();

  // Counters since construction: routed experts found in the cache, read for a pass that
  // routed to them, guessed and read ahead, and of those, routed to.
  int64_t hits() const { return hits_; }
  int64_t reads() const { return reads_; }
  int64_t guessed() const { return guessed_; }
  int64_t guess_hits() const { return guess_hits_; }
  // The leading guess ranks each of whose reads were routed to at least `rate` of the
  // time; a rank with fewer than `samples` reads decided counts as right, so that it gets
  // read and measured.
  int64_t sure_guesses(double rate, int64_t samples) const;
  // Per layer since construction: experts routed to, and of those found in the cache.
  const std::vector<int64_t>& routed_by_layer() const { return layer_routed_; }
  const std::vector<int64_t>& hits_by_layer() const { return layer_hits_; }
  // Experts of `layer` held in cache slots now.
  int64_t cached(int64_t layer) const { return int64_t(cached_[size_t(layer)].size()); }
  bool is_cached(int64_t layer, int32_t e) const;
  // Whether a slot holds (layer, e) or is being read for it: a cache slot, a staging slot
  // read for the running pass, or a guess read ahead.
  bool in_slot(int64_t layer, int32_t e) const {
    return layer >= 0 && layer < n_layers_ && e >= 0 && e < experts_ && where_[key(layer, e)] >= 0;
  }

 private:
  enum class State : uint8_t { Empty, Reading, Ready };
  struct Slot {
    State state = State::Empty;
    bool cache = false;   // role: cache slot (of `layer` when filled) or staging slot
    bool held = false;    // routed to by the running pass and not done with
    bool orphan = false;  // being read for an abandoned pass: freed when it lands
    bool guess = false;   // read ahead for a layer that has not routed yet
    int32_t rank = -1;    // of a guess
    int64_t layer = -1;
    int32_t expert = -1;
  };
  size_t key(int64_t layer, int32_t e) const { return size_t(layer * experts_ + e); }
  double score(int64_t layer, int32_t e) const;
  void free_staging(int32_t slot);
  // Frees (or orphans, while being read) a slot holding an unclaimed guess.
  void drop_guess(int32_t slot);
  // A read guess of `rank` was routed to (or not).
  void decide_guess(int32_t rank, bool routed);
  // The cache slot of `layer` an expert scoring `wanted` may take: its least used
  // expert's (not held), -1 when none is used less.
  int32_t victim_for(int64_t layer, double wanted) const;
  // Shared slots, at a pass's start: moves one cache slot between layers (see above).
  void move_slot();

  int64_t n_layers_, experts_;
  bool shared_;
  std::vector<double> decay_pow_;      // kDecay^n for n passes, scores being read often
  std::vector<Slot> slots_;
  std::vector<int32_t> where_;         // per (layer, expert): its slot or -1
  std::vector<double> score_;          // per (layer, expert): decayed use count at stamp_
  std::vector<int64_t> stamp_;         // per (layer, expert): the layer's pass count when score_ was set
  std::vector<int64_t> passes_;        // per layer: passes that routed through it
  std::vector<std::vector<int32_t>> cached_;  // per layer: its filled cache slots
  std::vector<int64_t> quota_;         // per layer: cache slots it may fill
  std::vector<int32_t> free_staging_;  // staging slots neither held nor being read
  std::vector<int32_t> spare_;         // cache slots not yet filled
  std::vector<Read> pending_;          // misses waiting for a staging slot (slot unset), in order
  size_t pending_head_ = 0;
  std::vector<Read> guesses_;          // guesses waiting for a staging slot, read last first
  int64_t hits_ = 0, reads_ = 0, guessed_ = 0, guess_hits_ = 0;
  std::vector<int64_t> rank_reads_, rank_hits_;  // per guess rank: reads decided, routed to
  std::vector<int64_t> layer_routed_, layer_hits_;  // per layer: experts routed to, found cached
};

}  // namespace flashspec
