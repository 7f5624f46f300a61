#include "offload/weight_stream.h"

#include "core/error.h"

namespace flashspec {

namespace {
constexpr auto kStepWait = std::chrono::milliseconds(20);  // bounds how long a stop waits
}

LayerPlan WeightStream::plan_for(const std::vector<std::vector<TensorExtent>>& layers, const StreamOptions& o) {
  PlanOptions po;
  po.ram_budget = o.ram_budget;
  po.ring_slots = o.ring_slots;
  po.align = UringReader::kAlign;
  return plan_layers(layers, po);
}

WeightStream::WeightStream(const std::string& path,
                           const std::vector<std::vector<TensorExtent>>& layers,
                           const StreamOptions& o)
    : path_(path), plan_(plan_for(layers, o)), opt_(o) {

  reader_ = std::make_unique<UringReader>(path, o);
  identity_ = std::make_unique<FileIdentity>(path, reader_->fd());
  if (o.expected_file_size && identity_->size() != o.expected_file_size)
    throw Error(path + ": file changed while streaming (size " + std::to_string(identity_->size()) +
                ", was " + std::to_string(o.expected_file_size) + " when the model was opened)");
  identity_->check(plan_.required_file_size);

  // Resident layers: read once, now, into owned memory (not through the mapping).
  const auto t0 = Clock::now();
  resident_.resize(size_t(plan_.n_resident));
  for (int l = 0; l < plan_.n_resident; ++l) {
    const LayerExtent& e = plan_.layers[size_t(l)];
    resident_[size_t(l)] = AlignedBuffer(e.read_bytes);
    for (const ReadRange& r : e.ranges)
      reader_->enqueue(ReadJob{r.file_offset, r.length, r.needed, resident_[size_t(l)].data() + r.buf_offset,
                               uint64_t(l)});
  }
  reader_->run_all();
  resident_ms_ = ms(Clock::now() - t0);
  resident_read_ = reader_->bytes_read();
  if (n_streamed() == 0) return;

  slots_.resize(size_t(plan_.ring_slots));
  std::vector<std::pair<uint8_t*, size_t>> bufs;
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
  while (!stop_ && resync_pos_ < 0 && fill_pos_ < freed_pos_ + k) {
    const int64_t p = fill_pos_;
    if (p % ns == 0) {
      identity_->check(plan_.required_file_size);  // throws: replaced / truncated / rewritten
      ++passes_;
    }
    const LayerExtent& e = plan_.layers[size_t(plan_.n_resident + p % ns)];
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
        fill_pos_ = freed_pos_ = resync_pos_;
        resync_pos_ = -1;
        continue;
      }
      fill_ring(lk);
      if (reader_->idle()) {
        cv_io_.wait(lk, [&] { return stop_ || resync_pos_ >= 0 || fill_pos_ < freed_pos_ + k; });
        continue;
      }
      lk.unlock();
      done.clear();
      reader_->step(kStepWait, done);
      lk.lock();
      bool landed = false;
      for (uint64_t tag : done) {
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
  if (layer < plan_.n_resident) return resident_[size_t(layer)].data();
  const int64_t k = int64_t(slots_.size()), ns = n_streamed();
  const int64_t idx = layer - plan_.n_resident;
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
  auto ready = [&] { return error_ || stop_ || (resync_pos_ < 0 && s.pos == consume_pos_ && s.ready); };
  if (!ready()) {
    const auto t0 = Clock::now();
    cv_consumer_.wait(lk, ready);
    wait_ms_ += ms(Clock::now() - t0);
  }
  if (error_) std::rethrow_exception(error_);
  if (stop_) throw Error(path_ + ": weight stream stopped");
  holding_ = true;
  return s.buf.data();
}

void WeightStream::release(int64_t layer) {
  if (layer < plan_.n_resident || layer >= int64_t(plan_.layers.size())) return;
  std::lock_guard lk(mu_);
  if (!holding_ || plan_.n_resident + consume_pos_ % n_streamed() != layer) return;  // stray release
  holding_ = false;
  freed_pos_ = ++consume_pos_;
  cv_io_.notify_all();
}

StreamCounters WeightStream::counters() const {
  std::lock_guard lk(mu_);
  StreamCounters c;
  c.bytes_read = reader_->bytes_read() - resident_read_;
  c.read_busy_ms = busy_ms_ + (busy_ ? ms(Clock::now() - busy_since_) : 0.0);
  c.io_wait_ms = wait_ms_;
  c.passes = passes_;
  c.resident_bytes = resident_read_;
  c.resident_load_ms = resident_ms_;
  return c;
}

std::vector<std::span<uint8_t>> WeightStream::buffers() const {
  std::vector<std::span<uint8_t>> out;
  for (const Slot& s : slots_) out.emplace_back(s.buf.data(), s.buf.size());
  for (const AlignedBuffer& b : resident_) out.emplace_back(b.data(), b.size());
  return out;
}

}  // namespace flashspec
