#include "tests/device_like_backend.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/ggml_type.h"
#include "kernels/host_fallback.h"
#include "kernels/immediate_copy_queue.h"

namespace flashspec::testing {

namespace {

using namespace std::chrono_literals;

// How long a wait in the fake queues may last before it counts as a deadlock: far
// beyond any delay they add, so a test that forgot an ordering fails instead of hanging.
constexpr auto kDeadlock = 20s;

bool inside(const std::map<const uint8_t*, size_t>& ranges, const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  auto it = ranges.upper_bound(b);
  if (it == ranges.begin()) return false;
  --it;
  return b >= it->first && b + bytes <= it->first + it->second;
}

size_t floats(int64_t n) { return size_t(n) * sizeof(float); }
size_t matrix(const WeightMatrix& w) { return size_t(w.rows * row_bytes(w.type, w.cols)); }

// The synchronous mode's queue: ops have finished when they return, so each copy can
// happen at once and every ordering call is trivially kept.
class CheckedCopyQueue final : public ImmediateCopyQueue {
 public:
  explicit CheckedCopyQueue(DeviceLikeBackend& be) : be_(be) {}
  ~CheckedCopyQueue() override {
    for (const void* p : pinned_) be_.unpin(p);
  }
  void pin(void* p, size_t bytes) override {
    be_.pin(p, bytes);
    pinned_.push_back(p);
  }
  void copy_in(void* dst, const void* src, size_t bytes) override {
    be_.check(dst, bytes, "copy_in destination");
    std::memcpy(dst, src, bytes);
    be_.count_streamed_copy(be_.pinned(src, bytes));
  }

 private:
  DeviceLikeBackend& be_;
  std::vector<const void*> pinned_;
};

// The asynchronous mode's queue (see the header). Events count generations: recording
// one makes a new generation, which is reached when the op thread passes the point (ops)
// or every copy queued before it has landed (copies); a wait captures the generation
// current when it is issued. An event is recorded on one side only (the generations of
// two sides could be reached out of order).
class AsyncCopyQueue final : public CopyQueue {
 public:
  AsyncCopyQueue(DeviceLikeBackend& be, uint32_t seed, int max_delay_us)
      : be_(be), rng_(seed), max_delay_us_(max_delay_us), worker_([this] { copy_loop(); }) {
    all_ = make_event();
  }
  ~AsyncCopyQueue() override {
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, kDeadlock, [&] { return landed_prefix_ == issued_; });
    }
    be_.synchronize_quietly();  // op-thread waits on this queue's events must end first
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    for (const void* p : pinned_) be_.unpin(p);
  }

  void pin(void* p, size_t bytes) override {
    be_.pin(p, bytes);
    pinned_.push_back(p);
  }
  Event make_event() override {
    std::lock_guard lk(mu_);
    events_.emplace_back();
    return Event(events_.size() - 1);
  }
  void copy_in(void* dst, const void* src, size_t bytes) override {
    be_.check(dst, bytes, "copy_in destination");
    be_.count_streamed_copy(be_.pinned(src, bytes));
    {
      std::lock_guard lk(mu_);
      pending_.push_back(Copy{++issued_, dst, src, bytes, std::vector<Wait>(copy_waits_.begin(), copy_waits_.end())});
    }
    cv_.notify_all();
  }
  void record_ops(Event e) override {
    uint64_t gen = 0;
    {
      std::lock_guard lk(mu_);
      gen = next_generation(e, Side::Ops);
    }
    be_.submit([this, e, gen] {
      {
        std::lock_guard lk(mu_);
        reach(e, gen);
      }
      cv_.notify_all();
    });
  }
  void record_copies(Event e) override {
    {
      std::lock_guard lk(mu_);
      const uint64_t gen = next_generation(e, Side::Copies);
      if (landed_prefix_ == issued_)
        reach(e, gen);
      else
        marks_.push_back(Mark{e, gen, issued_});
    }
    cv_.notify_all();
  }
  void copies_wait(Event e) override {
    std::lock_guard lk(mu_);
    const uint64_t gen = state(e).recorded;
    if (gen) copy_waits_[e] = gen;  // later generations of e supersede earlier ones
  }
  void ops_wait(Event e) override {
    uint64_t gen = 0;
    {
      std::lock_guard lk(mu_);
      gen = state(e).recorded;
    }
    if (!gen) return;
    be_.submit([this, e, gen] {
      std::unique_lock lk(mu_);
      if (!cv_.wait_for(lk, kDeadlock, [&] { return events_[size_t(e)].reached >= gen; }))
        throw Error("fake copy queue: ops waited 20 s for copies that never landed");
    });
  }
  bool passed(Event e) override {
    std::lock_guard lk(mu_);
    return state(e).reached >= state(e).recorded;
  }
  void wait(Event e) override {
    std::unique_lock lk(mu_);
    const uint64_t gen = state(e).recorded;
    if (!cv_.wait_for(lk, kDeadlock, [&] { return events_[size_t(e)].reached >= gen; }))
      throw Error("fake copy queue: the host waited 20 s for an event that never passed");
  }
  void order_ops_after_copies() override {
    record_copies(all_);
    ops_wait(all_);
  }
  void wait_host() override {
    std::unique_lock lk(mu_);
    const uint64_t target = issued_;
    if (!cv_.wait_for(lk, kDeadlock, [&] { return landed_prefix_ >= target; }))
      throw Error("fake copy queue: the host waited 20 s for copies that never landed");
  }

 private:
  enum class Side { None, Ops, Copies };
  struct EventState {
    uint64_t recorded = 0, reached = 0;
    Side side = Side::None;
  };
  using Wait = std::pair<Event, uint64_t>;  // event, generation
  struct Copy {
    uint64_t seq;
    void* dst;
    const void* src;
    size_t bytes;
    std::vector<Wait> after;
  };
  struct Mark {  // a copy-side generation, reached once copies 1..seq have landed
    Event e;
    uint64_t gen, seq;
  };

  // Callers hold mu_.
  EventState& state(Event e) {
    if (e < 0 || size_t(e) >= events_.size()) throw Error("fake copy queue: event " + std::to_string(e) + " was not made");
    return events_[size_t(e)];
  }
  uint64_t next_generation(Event e, Side side) {
    EventState& s = state(e);
    if (s.side != Side::None && s.side != side) throw Error("fake copy queue: an event recorded on both queues");
    s.side = side;
    return ++s.recorded;
  }
  void reach(Event e, uint64_t gen) {
    EventState& s = events_[size_t(e)];
    s.reached = std::max(s.reached, gen);
  }
  bool ready(const Copy& c) const {
    for (const auto& [e, gen] : c.after)
      if (events_[size_t(e)].reached < gen) return false;
    return true;
  }

  void copy_loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      std::vector<size_t> ready_now;
      cv_.wait(lk, [&] {
        ready_now.clear();
        for (size_t i = 0; i < pending_.size(); ++i)
          if (ready(pending_[i])) ready_now.push_back(i);
        return stop_ || !ready_now.empty();
      });
      if (stop_) return;
      // Any copy whose waits are satisfied may go first: the copy engine promises no order.
      const size_t pick = ready_now[rng_() % ready_now.size()];
      const Copy c = pending_[pick];
      pending_.erase(pending_.begin() + std::ptrdiff_t(pick));
      const auto delay = std::chrono::microseconds(rng_() % uint32_t(max_delay_us_ + 1));
      lk.unlock();
      std::this_thread::sleep_for(delay);
      std::memcpy(c.dst, c.src, c.bytes);  // reads the host source now, not when queued
      lk.lock();
      if (c.seq != landed_prefix_ + 1) be_.count_out_of_order_copy();
      landed_.insert(c.seq);
      while (!landed_.empty() && *landed_.begin() == landed_prefix_ + 1) {
        landed_.erase(landed_.begin());
        ++landed_prefix_;
      }
      while (!marks_.empty() && marks_.front().seq <= landed_prefix_) {
        reach(marks_.front().e, marks_.front().gen);
        marks_.pop_front();
      }
      cv_.notify_all();
    }
  }

  DeviceLikeBackend& be_;
  std::mutex mu_;
  std::condition_variable cv_;  // any event reached, copy queued or landed
  std::vector<EventState> events_;
  std::map<Event, uint64_t> copy_waits_;  // copies_wait() so far: every later copy waits for them
  std::deque<Copy> pending_;              // queued, not started
  std::set<uint64_t> landed_;             // landed beyond the prefix
  uint64_t issued_ = 0, landed_prefix_ = 0;
  std::deque<Mark> marks_;
  std::mt19937 rng_;
  int max_delay_us_;
  bool stop_ = false;
  Event all_ = 0;
  std::vector<const void*> pinned_;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace

std::span<const HostFallbackOp> DeviceLikeBackend::host_fallback_ops() const {
  return kHostFallbacksOf<DeviceLikeBackend>;
}

DeviceLikeBackend::DeviceLikeBackend(const DeviceLikeOptions& o) : opt_(o), cpu_(o.threads), op_rng_(o.seed) {
  if (opt_.async) op_thread_ = std::thread([this] { op_loop(); });
}

DeviceLikeBackend::~DeviceLikeBackend() {
  if (!op_thread_.joinable()) return;
  wait_idle(kDeadlock);
  {
    std::lock_guard lk(q_mu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  op_thread_.join();
}

void DeviceLikeBackend::op_loop() {
  std::unique_lock lk(q_mu_);
  for (;;) {
    q_cv_.wait(lk, [&] { return stop_ || (!held_ && !ops_.empty()); });
    if (stop_) return;
    std::function<void()> op = std::move(ops_.front());
    ops_.pop_front();
    running_ = true;
    const auto delay = std::chrono::microseconds(op_rng_() % uint32_t(opt_.max_op_delay_us + 1));
    lk.unlock();
    std::this_thread::sleep_for(delay);
    std::exception_ptr err;
    try {
      op();
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    if (err && !op_error_) op_error_ = err;
    running_ = false;
    q_cv_.notify_all();
  }
}

void DeviceLikeBackend::submit(std::function<void()> op) {
  if (!opt_.async) return op();
  {
    std::lock_guard lk(q_mu_);
    ops_.push_back(std::move(op));
  }
  q_cv_.notify_all();
}

void DeviceLikeBackend::hold_ops() {
  std::lock_guard lk(q_mu_);
  held_ = true;
}

void DeviceLikeBackend::resume_ops() {
  {
    std::lock_guard lk(q_mu_);
    held_ = false;
  }
  q_cv_.notify_all();
}

bool DeviceLikeBackend::wait_idle(std::chrono::milliseconds timeout) noexcept {
  if (!opt_.async) return true;
  std::unique_lock lk(q_mu_);
  return q_cv_.wait_for(lk, timeout, [&] { return ops_.empty() && !running_; });
}

void DeviceLikeBackend::synchronize_quietly() noexcept { wait_idle(kDeadlock); }

void DeviceLikeBackend::drain() {
  if (!wait_idle(kDeadlock)) throw Error("device-like backend: ops still running after 20 s");
  std::lock_guard lk(q_mu_);
  if (op_error_) std::rethrow_exception(std::exchange(op_error_, nullptr));
}

void DeviceLikeBackend::synchronize() { drain(); }

void* DeviceLikeBackend::alloc(size_t bytes) {
  void* p = cpu_.alloc(bytes);
  std::lock_guard lk(mu_);
  allocs_[static_cast<const uint8_t*>(p)] = bytes;
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return p;
}

void DeviceLikeBackend::free(void* p) noexcept {
  wait_idle(kDeadlock);  // queued ops may still read it
  {
    std::lock_guard lk(mu_);
    auto it = allocs_.find(static_cast<const uint8_t*>(p));
    if (it != allocs_.end()) {
      live_bytes_ -= it->second;
      allocs_.erase(it);
    }
  }
  cpu_.free(p);
}

std::optional<uint64_t> DeviceLikeBackend::peak_memory_bytes() const {
  std::lock_guard lk(mu_);
  return peak_bytes_;
}

int64_t DeviceLikeBackend::live_allocations() const {
  std::lock_guard lk(mu_);
  return int64_t(allocs_.size());
}

int64_t DeviceLikeBackend::streamed_copies() const {
  std::lock_guard lk(mu_);
  return streamed_copies_;
}

int64_t DeviceLikeBackend::unpinned_copies() const {
  std::lock_guard lk(mu_);
  return unpinned_copies_;
}

void DeviceLikeBackend::count_streamed_copy(bool from_pinned) {
  std::lock_guard lk(mu_);
  ++streamed_copies_;
  unpinned_copies_ += from_pinned ? 0 : 1;
}

int64_t DeviceLikeBackend::copies_landed_out_of_order() const {
  std::lock_guard lk(mu_);
  return out_of_order_;
}

void DeviceLikeBackend::count_out_of_order_copy() {
  std::lock_guard lk(mu_);
  ++out_of_order_;
}

void DeviceLikeBackend::check(const void* p, size_t bytes, const char* what) const {
  std::lock_guard lk(mu_);
  if (!inside(allocs_, p, bytes))
    throw Error(std::string("device-like backend: ") + what + " is not in backend memory");
}

bool DeviceLikeBackend::pinned(const void* p, size_t bytes) const {
  std::lock_guard lk(mu_);
  return inside(pinned_, p, bytes);
}

void DeviceLikeBackend::pin(const void* p, size_t bytes) {
  std::lock_guard lk(mu_);
  pinned_[static_cast<const uint8_t*>(p)] = bytes;
}

void DeviceLikeBackend::unpin(const void* p) {
  std::lock_guard lk(mu_);
  pinned_.erase(static_cast<const uint8_t*>(p));
}

void DeviceLikeBackend::upload(void* dst, const void* src, size_t bytes) {
  check(dst, bytes, "upload destination");
  if (!opt_.async) return (void)std::memcpy(dst, src, bytes);
  // upload() returns once src may be reused: the queued op copies a snapshot of it.
  const auto* s = static_cast<const uint8_t*>(src);
  submit([dst, snapshot = std::vector<uint8_t>(s, s + bytes)] { std::memcpy(dst, snapshot.data(), snapshot.size()); });
}

void DeviceLikeBackend::download(void* dst, const void* src, size_t bytes) {
  check(src, bytes, "download source");
  submit([=] { std::memcpy(dst, src, bytes); });
  drain();
}

void DeviceLikeBackend::copy(void* dst, const void* src, size_t bytes) {
  check(dst, bytes, "copy destination");
  check(src, bytes, "copy source");
  submit([=] { std::memcpy(dst, src, bytes); });
}

std::unique_ptr<CopyQueue> DeviceLikeBackend::make_copy_queue() {
  if (opt_.async) return std::make_unique<AsyncCopyQueue>(*this, opt_.seed * 7919u + 1u, opt_.max_copy_delay_us);
  return std::make_unique<CheckedCopyQueue>(*this);
}

void DeviceLikeBackend::get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  check(table.data, matrix(table), "embedding table");
  check(ids, size_t(n) * sizeof(int32_t), "token ids");
  check(out, floats(n * table.cols), "get_rows output");
  submit([=, this] { cpu_.get_rows(table, ids, n, out); });
}

void DeviceLikeBackend::matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  check(w.data, matrix(w), "weight matrix");
  check(x, floats(T * w.cols), "matmul input");
  check(y, floats(T * w.rows), "matmul output");
  submit([=, this] { cpu_.matmul(w, x, T, y); });
}

void DeviceLikeBackend::rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps,
                                float* y) {
  check(x, floats(T * dim), "rmsnorm input");
  check(weight, floats(dim), "norm weights");
  check(y, floats(T * dim), "rmsnorm output");
  submit([=, this] { cpu_.rmsnorm(x, weight, T, dim, eps, y); });
}

void DeviceLikeBackend::rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads,
                             int64_t head_dim, const RopeParams& r) {
  check(x, floats(T * n_heads * head_dim), "rope rows");
  check(positions, size_t(T) * sizeof(int32_t), "positions");
  if (r.factors) check(r.factors, floats(r.n_rot / 2), "rope factors");
  submit([=, this] { cpu_.rope(x, positions, T, n_heads, head_dim, r); });
}

void DeviceLikeBackend::attention(std::span<const AttentionArgs> calls) {
  for (const AttentionArgs& a : calls) {
    // Rows read: one per position, or a window's ring (a device has no block table).
    if (a.blocks) throw Error("device-like backend: a block table is host memory");
    const int64_t rows = a.ring_rows > 0 ? std::min(a.ring_rows, a.n_past + a.n_masked) : a.n_past + a.n_masked;
    const int64_t n = rows * a.n_kv_heads * a.head_dim;
    check(a.q, floats(a.T * a.n_heads * a.head_dim), "queries");
    check(a.k, kv_bytes(a.k_type, n), "key rows");
    check(a.v, kv_bytes(a.v_type, n), "value rows");
    if (a.mask) check(a.mask, size_t(a.T * a.n_masked), "mask");
    check(a.out, floats(a.T * a.n_heads * a.head_dim), "attention output");
  }
  submit([copy = std::vector<AttentionArgs>(calls.begin(), calls.end()), this] { cpu_.attention(copy); });
}

void DeviceLikeBackend::store_kv(const float* src, void* dst, int64_t n, KvType t) {
  check(src, floats(n), "store_kv source");
  check(dst, kv_bytes(t, n), "KV rows");
  submit([=, this] { cpu_.store_kv(src, dst, n, t); });
}

void DeviceLikeBackend::add_bias(float* y, const float* bias, int64_t T, int64_t n) {
  check(y, floats(T * n), "biased rows");
  check(bias, floats(n), "bias");
  submit([=, this] { cpu_.add_bias(y, bias, T, n); });
}

void DeviceLikeBackend::silu_mul(float* gate, const float* up, int64_t n) {
  check(gate, floats(n), "gate");
  check(up, floats(n), "up");
  submit([=, this] { cpu_.silu_mul(gate, up, n); });
}

void DeviceLikeBackend::add(float* y, const float* x, int64_t n) {
  check(y, floats(n), "residual");
  check(x, floats(n), "addend");
  submit([=, this] { cpu_.add(y, x, n); });
}

}  // namespace flashspec::testing
