#include "offload/weight_stream.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

namespace {
constexpr auto kStepWait = std::chrono::milliseconds(20);  // bounds how long a stop waits
}

WeightStream::WeightStream(const std::string& path, const std::vector<std::vector<TensorExtent>>& layers,
                           LayerPlan plan, const StreamOptions& o)
    : path_(path), plan_(std::move(plan)), opt_(o) {
  if (plan_.layers.size() != layers.size())
    throw Error("internal: a stream plan of " + std::to_string(plan_.layers.size()) + " layers for " +
                std::to_string(layers.size()));
  reader_ = std::make_unique<UringReader>(path, o);
  identity_ = std::make_unique<FileIdentity>(path, reader_->fd());
  if (o.expected_file_size && identity_->size() != o.expected_file_size)
    throw Error(path + ": file changed while streaming (size " + std::to_string(identity_->size()) +
                ", was " + std::to_string(o.expected_file_size) + " when the model was opened)");
  identity_->check(plan_.required_file_size);

  // Resident layers: read once, now, into owned memory (not through the mapping).
  const auto t0 = Clock::now();
  resident_.resize(plan_.layers.size());
  for (size_t l = 0; l < plan_.layers.size(); ++l) {
    const LayerExtent& e = plan_.layers[l];
    if (!e.resident) continue;
    resident_[size_t(l)] = AlignedBuffer(e.read_bytes);
    for (const ReadRange& r : e.ranges)
      reader_->enqueue(ReadJob{r.file_offset, r.length, r.needed, resident_[size_t(l)].data() + r.buf_offset,
                               uint64_t(l)});
  }
  reader_->run_all();
  resident_ms_ = ms(Clock::now() - t0);
  resident_read_ = reader_->bytes_read();

  std::vector<std::pair<uint8_t*, size_t>> bufs;
  if (plan_.experts) {
    const ExpertPlan& x = *plan_.experts;
    for (int64_t l = 0; l < x.n_layers; ++l) {
      std::vector<TensorExtent> tensors;
      for (size_t i : x.tensors[size_t(l)]) tensors.push_back(layers[size_t(l)][i]);
      for (int64_t e = 0; e < x.experts; ++e) slice_reads_.push_back(expert_reads(tensors, e, UringReader::kAlign));
    }
    experts_.emplace(x.n_layers, x.experts, x.staging_slots, x.cache_slots_per_layer, o.shared_cache);
    expert_mem_ = AlignedBuffer(size_t(x.memory_bytes()));
    expert_ranges_left_.assign(size_t(x.total_slots()), 0);
    expert_slot_read_.assign(size_t(x.total_slots()), 0);
    // Registered in pieces of whole slots: the kernel takes no fixed buffer over 1 GiB,
    // and a read must lie within one.
    const uint64_t piece = std::max<uint64_t>(1, (uint64_t(1) << 30) / x.slot_bytes) * x.slot_bytes;
    for (uint64_t at = 0; at < expert_mem_.size(); at += piece)
      bufs.emplace_back(expert_mem_.data() + at, size_t(std::min<uint64_t>(piece, expert_mem_.size() - at)));
  }
  if (n_streamed() == 0 && !experts_) return;

  slots_.resize(size_t(n_streamed() > 0 ? plan_.ring_slots : 0));
  for (Slot& s : slots_) {
    s.buf = AlignedBuffer(plan_.slot_bytes);
    bufs.emplace_back(s.buf.data(), s.buf.size());
  }
  reader_->register_buffers(bufs);  // best effort
  io_ = std::thread([this] { io_loop(); });
}

WeightStream::~WeightStream() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_io_.notify_all();
  cv_consumer_.notify_all();
  if (io_.joinable()) io_.join();
}

void WeightStream::fill_ring(std::unique_lock<std::mutex>&) {
  const int64_t k = int64_t(slots_.size()), ns = n_streamed();
  if (k == 0 || ns == 0) return;  // every dense part resident: only experts stream
  while (!stop_ && resync_pos_ < 0 && fill_pos_ < freed_pos_ + k) {
    const int64_t p = fill_pos_;
    if (p % ns == 0) {
      identity_->check(plan_.required_file_size);  // throws: replaced / truncated / rewritten
      ++passes_;
    }
    const LayerExtent& e = plan_.layers[size_t(plan_.streamed[size_t(p % ns)])];
    Slot& s = slots_[size_t(p % k)];
    s.pos = p;
    s.ready = false;
    s.ranges_left = int(e.ranges.size());
    for (const ReadRange& r : e.ranges)
      reader_->enqueue(ReadJob{r.file_offset, r.length, r.needed, s.buf.data() + r.buf_offset, uint64_t(p)});
    if (e.ranges.empty()) s.ready = true;
    ++fill_pos_;
    if (!busy_ && !reader_->idle()) {
      busy_ = true;
      busy_since_ = Clock::now();
    }
  }
}

void WeightStream::issue_expert_reads() {
  if (!experts_) return;
  while (const std::optional<ExpertCache::Read> r = experts_->next_read()) {
    if (r->layer < last_expert_layer_ && n_streamed() == 0)  // a new pass that reads no ring
      identity_->check(plan_.required_file_size);
    last_expert_layer_ = r->layer;
    const ExpertSliceReads& sr = expert_slices(r->layer, r->expert);
    uint8_t* dst = expert_mem_.data() + uint64_t(r->slot) * plan_.experts->slot_bytes;
    expert_ranges_left_[size_t(r->slot)] = int(sr.ranges.size());
    // What the reads will land: a range may run past the end of the file (O_DIRECT
    // alignment), where reading stops.
    uint64_t landing = 0;
    for (const ReadRange& g : sr.ranges)
      landing += std::min(g.length, identity_->size() > g.file_offset ? identity_->size() - g.file_offset : 0);
    expert_slot_read_[size_t(r->slot)] = landing;
    // Counted when issued, not when landed: a pass issues its reads before it ends (a
    // layer's guesses are issued or dropped by the time it routes), while a wrong guess
    // may land after it, between passes, where no pass record would see it.
    expert_read_bytes_ += landing;
    // A routed expert goes ahead of the ring reads not yet started: the pass waits for it
    // now. A guess for the next layer queues behind them.
    for (const ReadRange& g : sr.ranges) {
      const ReadJob job{g.file_offset, g.length, g.needed, dst + g.buf_offset, kExpertTag | uint64_t(r->slot)};
      if (r->guess) reader_->enqueue(job);
      else reader_->enqueue_urgent(job);
    }
    if (!busy_ && !reader_->idle()) {
      busy_ = true;
      busy_since_ = Clock::now();
    }
  }
}

void WeightStream::io_loop() {
  const int64_t k = int64_t(slots_.size());
  std::vector<uint64_t> done;
  std::unique_lock lk(mu_);
  try {
    while (!stop_) {
      if (resync_pos_ >= 0) {
        lk.unlock();
        reader_->cancel_all();
        lk.lock();
        if (busy_) busy_ms_ += ms(Clock::now() - busy_since_);
        busy_ = false;
        for (Slot& s : slots_) {
          s.pos = -1;
          s.ready = false;
          s.ranges_left = 0;
        }
        if (experts_) {  // the cancelled expert reads will not land
          for (size_t slot = 0; slot < expert_ranges_left_.size(); ++slot)
            if (expert_ranges_left_[slot] > 0) expert_read_bytes_ -= expert_slot_read_[slot];
          experts_->cancel_reads();
          std::fill(expert_ranges_left_.begin(), expert_ranges_left_.end(), 0);
        }
        fill_pos_ = freed_pos_ = resync_pos_;
        resync_pos_ = -1;
        continue;
      }
      issue_expert_reads();
      fill_ring(lk);
      if (reader_->idle()) {
        cv_io_.wait(lk, [&] {
          return stop_ || resync_pos_ >= 0 || (k > 0 && fill_pos_ < freed_pos_ + k) || expert_reads_waiting();
        });
        continue;
      }
      lk.unlock();
      done.clear();
      reader_->step(kStepWait, done);
      lk.lock();
      bool landed = false;
      for (uint64_t tag : done) {
        if (tag & kExpertTag) {
          const int32_t slot = int32_t(tag & ~kExpertTag);
          if (expert_ranges_left_[size_t(slot)] > 0 && --expert_ranges_left_[size_t(slot)] == 0) {
            experts_->landed(slot);
            landed = true;
          }
          continue;
        }
        Slot& s = slots_[size_t(int64_t(tag) % k)];
        if (s.pos == int64_t(tag) && --s.ranges_left == 0) {
          s.ready = true;
          landed = true;
        }
      }
      if (busy_ && reader_->idle()) {
        busy_ms_ += ms(Clock::now() - busy_since_);
        busy_ = false;
      }
      if (landed) cv_consumer_.notify_all();
    }
  } catch (...) {
    if (!lk.owns_lock()) lk.lock();
    error_ = std::current_exception();
    if (busy_) busy_ms_ += ms(Clock::now() - busy_since_);
    busy_ = false;
  }
  lk.unlock();
  cv_consumer_.notify_all();
  reader_->cancel_all();  // nothing may land in the slots once they are freed
}

const uint8_t* WeightStream::acquire(int64_t layer) {
  if (layer < 0 || layer >= int64_t(plan_.layers.size()))
    throw Error(path_ + ": weight stream has no layer " + std::to_string(layer));
  if (experts_) {
    // A new layer: the last one's experts are all done with, unless its pass stopped
    // midway; whatever that pass held or queued is dropped, but for guesses of this layer.
    std::lock_guard lk(mu_);
    if (error_) std::rethrow_exception(error_);
    experts_->abandon(layer);
  }
  const LayerExtent& e = plan_.layers[size_t(layer)];
  if (e.resident) return resident_[size_t(layer)].data();
  const int64_t k = int64_t(slots_.size()), ns = n_streamed();
  const int64_t idx = e.stream_index;
  std::unique_lock lk(mu_);
  if (error_) std::rethrow_exception(error_);
  if (holding_) {  // acquired again without a release: the held slot is done with
    holding_ = false;
    freed_pos_ = ++consume_pos_;
    cv_io_.notify_all();
  }
  if (consume_pos_ % ns != idx) {  // out of order: restart the stream at this layer
    int64_t p = std::max(fill_pos_, consume_pos_);
    p += (idx - p % ns + ns) % ns;
    consume_pos_ = resync_pos_ = p;
    cv_io_.notify_all();
  }
  Slot& s = slots_[size_t(consume_pos_ % k)];
  wait_until(lk, [&] { return resync_pos_ < 0 && s.pos == consume_pos_ && s.ready; });
  holding_ = true;
  return s.buf.data();
}

void WeightStream::wait_until(std::unique_lock<std::mutex>& lk, const std::function<bool()>& landed) {
  auto ready = [&] { return error_ || stop_ || landed(); };
  if (!ready()) {
    const auto t0 = Clock::now();
    cv_consumer_.wait(lk, ready);
    wait_ms_ += ms(Clock::now() - t0);
  }
  if (error_) std::rethrow_exception(error_);
  if (stop_) throw Error(path_ + ": weight stream stopped");
}

void WeightStream::release(int64_t layer) {
  if (layer < 0 || layer >= int64_t(plan_.layers.size()) || plan_.layers[size_t(layer)].resident) return;
  std::lock_guard lk(mu_);
  if (!holding_ || plan_.streamed[size_t(consume_pos_ % n_streamed())] != layer) return;  // stray release
  holding_ = false;
  freed_pos_ = ++consume_pos_;
  cv_io_.notify_all();
}

void WeightStream::route(int64_t layer, std::span<const int32_t> experts) {
  if (!experts_ || layer < 0 || layer >= int64_t(plan_.layers.size()))
    throw Error("internal: routing experts of layer " + std::to_string(layer) + " of a stream without them");
  {
    std::lock_guard lk(mu_);
    if (error_) std::rethrow_exception(error_);
    experts_->route(layer, experts);
  }
  cv_io_.notify_all();
}

size_t WeightStream::ready_among(int64_t layer, std::span<const int32_t> experts) {
  std::unique_lock lk(mu_);
  if (error_) std::rethrow_exception(error_);
  for (int32_t e : experts)
    if (!experts_ || !experts_->awaited(layer, e))  // it would never come
      throw Error("internal: expert " + std::to_string(e) + " of layer " + std::to_string(layer) + " was not routed to");
  size_t found = 0;
  wait_until(lk, [&] {
    for (found = 0; found < experts.size(); ++found)
      if (experts_->ready_slot(layer, experts[found]) >= 0) return true;
    return false;
  });
  return found;
}

void WeightStream::guess(int64_t layer, std::span<const int32_t> experts) {
  if (!experts_ || layer < 0 || layer >= int64_t(plan_.layers.size()))
    throw Error("internal: guessing experts of layer " + std::to_string(layer) + " of a stream without them");
  {
    std::lock_guard lk(mu_);
    if (error_) std::rethrow_exception(error_);
    experts_->guess(layer, experts.first(std::min(experts.size(), guess_room())));
  }
  cv_io_.notify_all();
}

size_t WeightStream::guess_room() {
  // A guess is read in time the storage would otherwise be idle, or it delays the reads
  // a pass waits for: a wrong one by all its bytes. So guesses get the bytes the storage
  // could have read in its idle time since the last guess (a moving average over layers,
  // at the rate reads have been running): none when the storage is the bottleneck, as
  // many as the layer needs when compute is.
  const Clock::time_point now = Clock::now();
  const double busy = busy_ms_ + (busy_ ? ms(now - busy_since_) : 0.0);
  if (last_guess_ != Clock::time_point{}) {
    const double idle = std::max(0.0, ms(now - last_guess_) - (busy - busy_at_last_guess_));
    idle_ms_ = 0.7 * idle_ms_ + 0.3 * idle;
  }
  last_guess_ = now;
  busy_at_last_guess_ = busy;
  const double bytes_per_ms = busy_ms_ > 0 ? double(reader_->bytes_read()) / busy_ms_ : 0.0;
  const size_t idle_room = size_t(idle_ms_ * bytes_per_ms / double(plan_.experts->slot_bytes));
  // A guess that is nearly always right costs nothing even when the storage is the
  // bottleneck: it is read anyway, only sooner, while the pass computes instead of
  // after it routed. So the leading ranks whose reads were routed to at least
  // kSureGuess of the time are read ahead whatever the idle time.
  if (!opt_.sure_guesses) return idle_room;
  return std::max(idle_room, size_t(experts_->sure_guesses(kSureGuess, kSureGuessSamples)));
}

const uint8_t* WeightStream::resident_layer(int64_t layer) const {
  return layer >= 0 && layer < int64_t(plan_.layers.size()) && plan_.layers[size_t(layer)].resident
             ? resident_[size_t(layer)].data()
             : nullptr;
}

const uint8_t* WeightStream::expert(int64_t layer, int32_t e) {
  std::unique_lock lk(mu_);
  if (error_) std::rethrow_exception(error_);
  if (!experts_ || !experts_->awaited(layer, e))  // it would never come
    throw Error("internal: expert " + std::to_string(e) + " of layer " + std::to_string(layer) + " was not routed to");
  int32_t slot = -1;
  wait_until(lk, [&] { return (slot = experts_->ready_slot(layer, e)) >= 0; });
  return expert_mem_.data() + uint64_t(slot) * plan_.experts->slot_bytes;
}

void WeightStream::done_with(int64_t layer, int32_t e) {
  {
    std::lock_guard lk(mu_);
    experts_->done(layer, e);
  }
  cv_io_.notify_all();  // a staging slot may be free for the next read
}

void WeightStream::wait_expert_reads() {
  std::unique_lock lk(mu_);
  cv_consumer_.wait(lk, [&] {  // not wait_until: this is no pass waiting for weights
    return error_ || stop_ ||
           (!expert_reads_waiting() &&
            std::all_of(expert_ranges_left_.begin(), expert_ranges_left_.end(), [](int n) { return n == 0; }));
  });
  if (error_) std::rethrow_exception(error_);
}

int64_t WeightStream::cached_experts(int64_t layer) const {
  std::lock_guard lk(mu_);
  return experts_ ? experts_->cached(layer) : 0;
}

void WeightStream::held_experts(int64_t layer, std::span<uint8_t> held) const {
  std::lock_guard lk(mu_);
  for (size_t e = 0; e < held.size(); ++e) held[e] = experts_ && experts_->in_slot(layer, int32_t(e));
}

StreamCounters WeightStream::counters() const {
  StreamCounters c = totals();
  std::lock_guard lk(mu_);
  if (experts_) {
    c.experts_routed_by_layer = experts_->routed_by_layer();
    c.expert_hits_by_layer = experts_->hits_by_layer();
  }
  return c;
}

StreamCounters WeightStream::totals() const {
  std::lock_guard lk(mu_);
  StreamCounters c;
  c.bytes_read = reader_->bytes_read() - resident_read_;
  c.read_busy_ms = busy_ms_ + (busy_ ? ms(Clock::now() - busy_since_) : 0.0);
  c.io_wait_ms = wait_ms_;
  c.passes = passes_;
  c.resident_bytes = resident_read_;
  c.resident_load_ms = resident_ms_;
  c.expert_bytes_read = expert_read_bytes_;
  if (experts_) {
    c.expert_reads = experts_->reads();
    c.expert_hits = experts_->hits();
    c.expert_guesses = experts_->guessed();
    c.expert_guess_hits = experts_->guess_hits();
  }
  return c;
}

std::vector<std::span<uint8_t>> WeightStream::buffers() const {
  std::vector<std::span<uint8_t>> out;
  for (const Slot& s : slots_) out.emplace_back(s.buf.data(), s.buf.size());
  for (const AlignedBuffer& b : resident_)
    if (b.size()) out.emplace_back(b.data(), b.size());
  if (expert_mem_.size()) out.emplace_back(expert_mem_.data(), expert_mem_.size());
  return out;
}

}  // namespace flashspec
