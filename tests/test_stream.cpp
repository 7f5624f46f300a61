// Weight streaming (offload/): layer plans, the io_uring reader, the bandwidth cap, the
// weight stream's ring, the streamed target against the resident one (bit-identical),
// the CLI wiring, peak RSS under a budget, and the fault paths (each ends in an Error,
// never a hang). No test asserts a speed: rates are measured by flashspec-iobench.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <functional>
#include <set>
#include <future>
#include <thread>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/activations.h"
#include "model/model.h"
#include "model/placed_weights.h"
#include "offload/layer_plan.h"
#include "offload/throttle.h"
#include "offload/uring_reader.h"
#include "offload/weight_stream.h"
#include "target/staged_layers.h"
#include "target/streamed_layers.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

// Runs `body` on its own thread; a body that has not finished after `seconds` is a
// hang: reported, and the test binary exits instead of hanging the suite.
void within(double seconds, const std::function<void()>& body) {
  std::promise<void> done;
  std::future<void> f = done.get_future();
  std::thread t([&] {
    try {
      body();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "test_stream: hang (no result after %.0f s)\n", seconds);
    std::_Exit(3);
  }
  t.join();
  f.get();
}

// The Error message `body` throws ("" when it throws nothing).
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = uint8_t(x);
  }
  return v;
}

struct PatternFile {
  TempFile file{"fs-stream", ".bin"};
  std::vector<uint8_t> bytes;
  explicit PatternFile(size_t n, uint32_t seed = 1) : bytes(pattern(n, seed)) { write_file(file.path, bytes); }
};

// Layers of `n` tensors each, back to back after `start` (with a small gap, like GGUF's
// alignment padding and norm vectors between matrices).
std::vector<std::vector<TensorExtent>> synthetic_layers(int n_layers, uint64_t start,
                                                        const std::vector<uint64_t>& sizes) {
  std::vector<std::vector<TensorExtent>> out;
  uint64_t off = start;
  for (int l = 0; l < n_layers; ++l) {
    std::vector<TensorExtent> layer;
    for (uint64_t s : sizes) {
      layer.push_back(TensorExtent{off, s + uint64_t(l) * 32});
      off += s + uint64_t(l) * 32 + 96;
    }
    out.push_back(layer);
  }
  return out;
}

void check_layer_bytes(const WeightStream& ws, const std::vector<std::vector<TensorExtent>>& layers,
                       const std::vector<uint8_t>& file, int64_t l, const uint8_t* buf) {
  const LayerExtent& e = ws.plan().layers[size_t(l)];
  for (size_t i = 0; i < layers[size_t(l)].size(); ++i) {
    const TensorExtent& t = layers[size_t(l)][i];
    REQUIRE(std::memcmp(buf + e.tensor_offset[i], file.data() + t.offset, t.bytes) == 0);
  }
}

}  // namespace

// ---------------------------------------------------------------- layer plan

TEST_CASE("stream: layer plan reads each layer as 4 KiB aligned covering ranges") {
  // Contiguous: one range [floor4k(first), ceil4k(end)), tensors given in any order.
  const std::vector<TensorExtent> contiguous = {{8100, 10000}, {5000, 100}, {5100, 3000}};
  LayerPlan p = plan_layers({contiguous}, PlanOptions{});
  REQUIRE(p.layers.size() == 1);
  const LayerExtent& e = p.layers[0];
  REQUIRE(e.ranges.size() == 1);
  CHECK(e.ranges[0].file_offset == 4096);
  CHECK(e.ranges[0].length == 20480 - 4096);
  CHECK(e.ranges[0].needed == 18100 - 4096);
  CHECK(e.tensor_offset == std::vector<uint64_t>{8100 - 4096, 5000 - 4096, 5100 - 4096});
  CHECK(e.tensor_bytes == 13100);
  CHECK(e.read_bytes == 16384);
  CHECK(p.required_file_size == 18100);

  // Non-contiguous: more than 1 MiB of other data between two clusters -> two ranges laid
  // out one after the other in the layer buffer.
  const std::vector<TensorExtent> scattered = {{100, 200}, {300, 5000}, {3 * MiB + 10, 7000}};
  p = plan_layers({scattered}, PlanOptions{});
  const LayerExtent& s = p.layers[0];
  REQUIRE(s.ranges.size() == 2);
  CHECK(s.ranges[0].file_offset == 0);
  CHECK(s.ranges[0].length == 8192);
  CHECK(s.ranges[1].file_offset == 3 * MiB);
  CHECK(s.ranges[1].length == 8192);
  CHECK(s.ranges[1].buf_offset == 8192);
  CHECK(s.tensor_offset == std::vector<uint64_t>{100, 300, 8192 + 10});
  CHECK(s.read_bytes == 16384);
  for (const ReadRange& r : s.ranges) {
    CHECK(r.file_offset % 4096 == 0);
    CHECK(r.length % 4096 == 0);
    CHECK(r.buf_offset % 4096 == 0);
  }
}

TEST_CASE("stream: plan keeps layers resident under the budget, spread over the pass, the ring counted") {
  // 8 layers of exactly 10 pages.
  std::vector<std::vector<TensorExtent>> layers;
  for (uint64_t l = 0; l < 8; ++l) layers.push_back({{l * 40960, 40960}});
  const uint64_t layer = 40960;
  auto plan = [&](uint64_t budget) {
    PlanOptions o;
    o.layer_memory = budget;
    return plan_layers(layers, o);
  };
  LayerPlan p = plan(0);
  CHECK(p.n_resident == 0);
  CHECK(p.ring_slots == 2);
  CHECK(p.ring_bytes == 2 * layer);
  CHECK(p.ring_over_budget());
  CHECK(p.streamed_bytes == 8 * layer);
  p = plan(layer);  // one layer: not even the ring fits -> minimum ring, nothing resident
  CHECK(p.n_resident == 0);
  CHECK(p.ring_over_budget());
  p = plan(4 * layer);  // half: the ring takes two layers' worth
  CHECK(p.n_resident == 2);
  CHECK(!p.ring_over_budget());
  CHECK(p.memory_bytes() <= 4 * layer);
  // Spread over the pass, a streamed layer first: 2 of 8 at 8/3 and 16/3.
  CHECK(!p.layers[0].resident);
  CHECK(p.layers[2].resident);
  CHECK(p.layers[5].resident);
  CHECK(p.streamed == std::vector<int>{0, 1, 3, 4, 6, 7});
  CHECK(p.layers[3].stream_index == 2);
  CHECK(p.layers[2].stream_index == -1);
  p = plan(7 * layer);
  CHECK(p.n_resident == 5);
  p = plan(8 * layer);  // everything fits: no ring at all
  CHECK(p.n_resident == 8);
  CHECK(p.ring_slots == 0);
  CHECK(p.streamed_bytes == 0);
  CHECK(p.resident_bytes == 8 * layer);
  PlanOptions bad;
  bad.ring_slots = 1;
  CHECK_THROWS_AS(plan_layers(layers, bad), Error);
}

TEST_CASE("stream: plan takes a third ring slot only where the budget holds it and at least 12 layers stream") {
  std::vector<std::vector<TensorExtent>> layers;
  for (uint64_t l = 0; l < 16; ++l) layers.push_back({{l * 40960, 40960}});
  const uint64_t layer = 40960;
  auto plan = [&](uint64_t budget, int slots) {
    PlanOptions o;
    o.layer_memory = budget;
    o.ring_slots = slots;
    return plan_layers(layers, o);
  };
  LayerPlan p = plan(4 * layer, 3);  // two slots would stream 14 layers: a third takes a resident layer's place
  CHECK(p.ring_slots == 3);
  CHECK(p.ring_bytes == 3 * layer);
  CHECK(p.n_resident == 1);
  CHECK(p.streamed.size() == 15);
  CHECK(p.memory_bytes() <= 4 * layer);
  p = plan(4 * layer, 2);  // the default
  CHECK(p.ring_slots == 2);
  CHECK(p.n_resident == 2);
  p = plan(7 * layer, 3);  // two slots stream 11 layers: a twelfth read per pass would cost too much
  CHECK(p.ring_slots == 2);
  CHECK(p.n_resident == 5);
  p = plan(2 * layer, 3);  // the budget holds only two slots
  CHECK(p.ring_slots == 2);
  CHECK(!p.ring_over_budget());
  p = plan(0, 3);  // nothing fits: the minimum ring
  CHECK(p.ring_slots == 2);
  CHECK(p.ring_over_budget());
}

// ---------------------------------------------------------------- bandwidth cap

TEST_CASE("stream: token bucket holds the long-run rate (injected clock)") {
  double now = 100.0;
  TokenBucket b(1e9, double(MiB), [&] { return now; });
  CHECK(b.limited());
  // Back-to-back 1 MiB requests: each starts when the bucket allows it.
  const int n = 5000;
  const double t0 = now;
  for (int i = 0; i < n; ++i) {
    now += b.delay(MiB);
    CHECK(b.delay(MiB) == 0.0);
    b.take(MiB);
  }
  // n requests started over (n-1) refills of 1 MiB: the rate is 1e9 to rounding.
  const double rate = double(n - 1) * double(MiB) / (now - t0);
  CHECK(std::fabs(rate / 1e9 - 1.0) < 1e-6);

  // Idle time does not bank more than the burst: after 10 s, one request goes at once,
  // the next waits a full refill.
  now += 10.0;
  CHECK(b.delay(MiB) == 0.0);
  b.take(MiB);
  CHECK(b.delay(MiB) == doctest::Approx(double(MiB) / 1e9).epsilon(1e-9));

  // A request bigger than the burst goes once the bucket is full, and its debt is repaid
  // before the next one: the rate still holds.
  now += 1.0;
  b.take(8 * MiB);
  CHECK(b.delay(MiB) == doctest::Approx(double(8 * MiB) / 1e9).epsilon(1e-9));

  TokenBucket unlimited(0, 1, [&] { return now; });
  CHECK(!unlimited.limited());
  unlimited.take(1ull << 40);
  CHECK(unlimited.delay(1ull << 40) == 0.0);
}

// ---------------------------------------------------------------- io_uring reader

TEST_CASE("stream: io_uring reader lands the exact bytes, O_DIRECT and buffered") {
  const PatternFile pf(MiB + 12345);  // not a multiple of 4 KiB: the last read meets EOF
  const uint64_t size = pf.bytes.size();
  const uint64_t padded = (size + 4095) / 4096 * 4096;
  for (bool direct : {true, false})
    for (int depth : {1, 3, 16})
      for (uint64_t req : {uint64_t(4096), 64 * KiB, MiB}) {
        CAPTURE(direct);
        CAPTURE(depth);
        CAPTURE(req);
        ReaderOptions o;
        o.direct = direct;
        o.depth = depth;
        o.request_bytes = req;
        UringReader r(pf.file.path, o);
        AlignedBuffer whole(padded), part(64 * KiB);
        r.enqueue(ReadJob{0, padded, size, whole.data(), 7});
        r.enqueue(ReadJob{512 * KiB, 64 * KiB, 64 * KiB, part.data(), 8});
        std::vector<uint64_t> done, all;
        while (!r.idle()) {
          done.clear();
          r.step(std::chrono::milliseconds(100), done);
          all.insert(all.end(), done.begin(), done.end());
        }
        std::sort(all.begin(), all.end());
        CHECK(all == std::vector<uint64_t>{7, 8});
        CHECK(std::memcmp(whole.data(), pf.bytes.data(), size) == 0);
        CHECK(std::memcmp(part.data(), pf.bytes.data() + 512 * KiB, 64 * KiB) == 0);
        CHECK(r.bytes_read() >= size + 64 * KiB);
      }
}

TEST_CASE("stream: reader completes short reads and retries EINTR/EAGAIN") {
  const PatternFile pf(2 * MiB);
  for (bool direct : {true, false}) {
    CAPTURE(direct);
    ReaderOptions o;
    o.direct = direct;
    o.depth = 4;
    o.request_bytes = 256 * KiB;
    o.fault = [](uint64_t i, uint64_t) -> int {
      if (i == 0) return -EINTR;
      if (i == 2 || i == 3) return -EAGAIN;
      if (i == 5) return 4096;  // a short read: the rest is resubmitted
      if (i == 9) return 12288;
      return 0;
    };
    UringReader r(pf.file.path, o);
    AlignedBuffer buf(2 * MiB);
    r.enqueue(ReadJob{0, 2 * MiB, 2 * MiB, buf.data(), 1});
    r.run_all();
    CHECK(std::memcmp(buf.data(), pf.bytes.data(), 2 * MiB) == 0);
  }
}

TEST_CASE("stream: reader reports a read error with the file and offset") {
  const PatternFile pf(2 * MiB);
  ReaderOptions o;
  o.depth = 1;
  o.request_bytes = 256 * KiB;
  o.fault = [](uint64_t i, uint64_t) { return i == 3 ? -EIO : 0; };
  UringReader r(pf.file.path, o);
  AlignedBuffer buf(2 * MiB);
  r.enqueue(ReadJob{0, 2 * MiB, 2 * MiB, buf.data(), 1});
  const std::string err = error_of([&] { r.run_all(); });
  CHECK(err == pf.file.path + ": read failed at offset " + std::to_string(3 * 256 * KiB) + ": " +
                   std::strerror(EIO));
}

TEST_CASE("stream: reader reports a file shorter than the data it needs") {
  const PatternFile pf(100000);
  for (bool direct : {true, false}) {
    ReaderOptions o;
    o.direct = direct;
    UringReader r(pf.file.path, o);
    AlignedBuffer buf(128 * KiB);
    r.enqueue(ReadJob{0, 128 * KiB, 120000, buf.data(), 1});
    const std::string err = error_of([&] { r.run_all(); });
    CHECK(err.rfind(pf.file.path + ": truncated: end of file at offset 100000", 0) == 0);
  }
  CHECK(error_of([] { UringReader r("/nonexistent/model.gguf", ReaderOptions{}); }) ==
        "/nonexistent/model.gguf: cannot open: No such file or directory");
}

// ---------------------------------------------------------------- weight stream

TEST_CASE("stream: weight stream hands out every layer's bytes, pass after pass") {
  // 10 layers of 5 tensors; layer 6 is scattered (its last tensor 2 MiB further on).
  auto layers = synthetic_layers(10, 5000, {20000, 3000, 70000, 12345, 40000});
  layers[6].push_back(TensorExtent{layers[9].back().offset + 2 * MiB, 30000});
  const uint64_t end = layers[6].back().offset + layers[6].back().bytes + 777;
  const PatternFile pf(end);
  const LayerPlan p0 = plan_layers(layers, PlanOptions{});
  CHECK(p0.layers[6].ranges.size() == 2);
  uint64_t total = 0;
  for (const LayerExtent& e : p0.layers) total += e.read_bytes;
  for (uint64_t budget : {uint64_t(0), p0.slot_bytes, 2 * p0.slot_bytes + 3 * p0.layers[0].read_bytes, total})
    for (bool direct : {true, false}) {
      CAPTURE(budget);
      CAPTURE(direct);
      StreamOptions o;
      o.direct = direct;
      o.depth = 3;
      o.request_bytes = 16 * KiB;
      within(60, [&] {
        WeightStream ws(pf.file.path, layers, plan_layers(layers, PlanOptions{.layer_memory = budget}), o);
        CHECK(ws.direct() == direct);
        for (int pass = 0; pass < 3; ++pass)
          for (int64_t l = 0; l < 10; ++l) {
            const uint8_t* buf = ws.acquire(l);
            check_layer_bytes(ws, layers, pf.bytes, l, buf);
            ws.release(l);
          }
        const StreamCounters c = ws.counters();
        CHECK(c.bytes_read + 3 * 4096 * 10 >= 3 * ws.plan().streamed_bytes);
        if (ws.plan().streamed_bytes == 0) CHECK(c.bytes_read == 0);
        CHECK(c.resident_bytes + 4096 >= ws.plan().resident_bytes);
      });
    }
}

TEST_CASE("stream: a layer acquired out of order restarts the stream there") {
  const auto layers = synthetic_layers(6, 0, {50000, 9000});
  const PatternFile pf(layers.back().back().offset + 60000);
  StreamOptions o;
  o.request_bytes = 8 * KiB;
  within(30, [&] {
    WeightStream ws(pf.file.path, layers, plan_layers(layers, {}), o);
    for (int64_t l : {0, 1, 2}) {
      check_layer_bytes(ws, layers, pf.bytes, l, ws.acquire(l));
      ws.release(l);
    }
    // The pass is abandoned after layer 2; the next one starts at 0.
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t l = 0; l < 6; ++l) {
        check_layer_bytes(ws, layers, pf.bytes, l, ws.acquire(l));
        ws.release(l);
      }
    // A jump forward, an acquire without release, a stray release.
    check_layer_bytes(ws, layers, pf.bytes, 4, ws.acquire(4));
    check_layer_bytes(ws, layers, pf.bytes, 5, ws.acquire(5));
    ws.release(3);
    ws.release(5);
    check_layer_bytes(ws, layers, pf.bytes, 0, ws.acquire(0));
    CHECK_THROWS_AS(ws.acquire(6), Error);
  });
}

TEST_CASE("stream: destroying the stream mid-pass or while throttled does not hang") {
  const auto layers = synthetic_layers(4, 0, {MiB, MiB});
  const PatternFile pf(layers.back().back().offset + 2 * MiB);
  within(30, [&] {
    StreamOptions o;
    WeightStream ws(pf.file.path, layers, plan_layers(layers, {}), o);
    ws.acquire(0);  // held, never released
  });
  within(30, [&] {
    StreamOptions o;
    o.bandwidth = 1e6;  // 1 MB/s: the ring takes seconds to fill
    o.request_bytes = 64 * KiB;
    WeightStream ws(pf.file.path, layers, plan_layers(layers, {}), o);
  });
  within(30, [&] {  // a failed stream
    StreamOptions o;
    o.fault = [](uint64_t, uint64_t) { return -EIO; };
    WeightStream ws(pf.file.path, layers, plan_layers(layers, {}), o);
    CHECK_THROWS_AS(ws.acquire(0), Error);
    CHECK_THROWS_AS(ws.acquire(1), Error);  // the error stays
  });
}

// ---------------------------------------------------------------- the streamed target

namespace {

const char* const kModels[] = {"stories260K",           "salty279K",
                               "stories260K-wide-f32",  "stories260K-wide-q8_0",
                               "stories260K-wide-q4_0", "stories260K-wide-q4_k_m"};

}  // namespace

TEST_CASE("stream: streamed generation is bit-identical to resident on every reference model") {
  CpuBackend backend(2);
  for (const char* name : kModels) {
    CAPTURE(name);
    Model m(model_path(name), backend);
    const Tokenizer tok = Tokenizer::from_gguf(m.file());
    const nlohmann::json refs = read_json(reference_path(name));
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < 2; ++i) prompts.push_back(tok.encode(refs[i].at("prompt").get<std::string>(), tok.add_bos()));
    std::vector<GenerationResult> want;
    for (const auto& p : prompts) want.push_back(generate_target_only(m, p, greedy(24, 4)));

    const LayerPlan p0 = plan_layers(layer_extents(m.weights()), PlanOptions{});
    const uint64_t total = p0.streamed_bytes;
    struct Budget {
      uint64_t bytes;
      bool direct;
    };
    // 0, one layer, half the model, half the model resident plus the ring, all of it.
    const uint64_t half_resident = total / 2 + 2 * p0.slot_bytes;
    for (const Budget b : {Budget{0, true}, Budget{p0.slot_bytes, true}, Budget{total / 2, true},
                           Budget{half_resident, true}, Budget{total, true}, Budget{half_resident, false}}) {
      CAPTURE(b.bytes);
      CAPTURE(b.direct);
      StreamOptions o;
      o.direct = b.direct;
      auto src = std::make_unique<StreamedLayers>(m.file(), m.weights(), PlanOptions{.layer_memory = b.bytes}, o);
      WeightStream& ws = src->stream();
      m.set_layer_source(std::move(src));
      if (b.bytes == total) CHECK(ws.plan().n_resident == int(m.config().n_layers));
      if (b.bytes == half_resident) {
        CHECK(ws.plan().n_resident > 0);
        CHECK(ws.plan().n_resident < int(m.config().n_layers));
      }
      for (size_t i = 0; i < prompts.size(); ++i) {
        const GenerationResult r = generate_target_only(m, prompts[i], greedy(24, 4));
        CHECK(r.tokens == want[i].tokens);
        CHECK(bit_identical(r.logits, want[i].logits));
      }
      if (b.bytes < total) CHECK(ws.counters().bytes_read > 0);
      if (b.bytes == total) CHECK(ws.counters().bytes_read == 0);
    }
    m.set_layer_source(std::make_unique<ResidentLayers>(m.weights()));
  }
}

namespace {

// A copy of a fixture model in a temp file, with its layers after every other tensor
// (so cutting the file inside the last layer leaves the mapped embedding/output intact).
struct ModelCopy {
  TempFile file{"fs-stream-model"};
  explicit ModelCopy(const std::string& name) { write_file(file.path, read_file(model_path(name))); }
};

std::string generate_error(Model& m, int64_t n) {
  std::string err;
  within(60, [&] {
    err = error_of([&] {
      const std::vector<int32_t> prompt = {1, 403, 407};
      generate_target_only(m, prompt, greedy(n, 4));
    });
  });
  return err;
}

}  // namespace

TEST_CASE("stream: an I/O error in the stream reaches generate() as an Error") {
  CpuBackend backend(2);
  Model m(model_path("stories260K-wide-q8_0"), backend);
  StreamOptions o;
  o.request_bytes = 64 * KiB;
  o.fault = [](uint64_t i, uint64_t) { return i == 40 ? -EIO : 0; };
  m.set_layer_source(std::make_unique<StreamedLayers>(m.file(), m.weights(), PlanOptions{}, o));
  const std::string err = generate_error(m, 8);
  CHECK(err.rfind(model_path("stories260K-wide-q8_0") + ": read failed at offset ", 0) == 0);
  CHECK(err.find(std::strerror(EIO)) != std::string::npos);
  CHECK(generate_error(m, 2) == err);  // and stays failed
}

TEST_CASE("stream: a model file truncated while streaming ends in a clear error") {
  for (bool direct : {true, false}) {
    CAPTURE(direct);
    ModelCopy copy("stories260K-wide-q8_0");
    CpuBackend backend(2);
    Model m(copy.file.path, backend);
    const std::vector<LayerMatrixTensor>& last = m.weights().layer_matrices(m.weights().n_layers() - 1);
    for (const GgufTensorInfo* t : {&m.file().require_tensor("token_embd.weight"), &m.file().require_tensor("output.weight")})
      REQUIRE(t->file_offset + t->nbytes < last.front().tensor->file_offset);
    StreamOptions o;
    o.direct = direct;
    m.set_layer_source(std::make_unique<StreamedLayers>(m.file(), m.weights(), PlanOptions{}, o));
    // Cut inside the last layer's data, after the stream opened (the GGUF reader rejects
    // files that are short from the start).
    REQUIRE(::truncate(copy.file.path.c_str(), off_t(last.back().tensor->file_offset + 1000)) == 0);
    const std::string err = generate_error(m, 4);
    // Every pass first checks the file still has its size, so the cut is named before a
    // read comes back short.
    CAPTURE(err);
    CHECK(err.rfind(copy.file.path + ": changed while in use (size " + std::to_string(last.back().tensor->file_offset + 1000), 0) == 0);
  }
}

TEST_CASE("stream: a model file replaced while streaming ends in a clear error") {
  ModelCopy copy("stories260K-wide-q4_0");
  CpuBackend backend(2);
  Model m(copy.file.path, backend);
  m.set_layer_source(std::make_unique<StreamedLayers>(m.file(), m.weights(), PlanOptions{}));
  // Same bytes, another file: the descriptor still reads the old one, the path does not.
  TempFile other("fs-stream-other");
  write_file(other.path, read_file(copy.file.path));
  REQUIRE(std::rename(other.path.c_str(), copy.file.path.c_str()) == 0);
  const std::string err = generate_error(m, 6);
  CHECK(err == copy.file.path + ": file changed while streaming (replaced by another file)");
}

// ---------------------------------------------------------------- CLI

namespace {

nlohmann::json cli_json(const std::vector<std::string>& args) {
  const CliResult r = run_cli(args, "", 120);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("stream: CLI --stream matches the resident run (plain and speculative) and reports I/O") {
  const std::string model = model_path("stories260K-wide-q8_0");
  const std::vector<std::string> base = {"generate", "-m", model, "-p", "Once upon a time", "-n", "24",
                                         "--json", "--logits", "3", "--ignore-eos", "-t", "2", "--seed", "0"};
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"-d", model_path("salty279K"), "--chain", "4"}}) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    const nlohmann::json want = cli_json(a);
    // Resident: nothing read, so no bytes per token and no per-pass bytes.
    CHECK(want.at("stats").at("decode_bytes_read").get<int64_t>() == 0);
    CHECK(want.at("stats").at("bytes_read_per_token").get<double>() == 0);
    CHECK(!want.at("stats").at("timeline")[0].contains("bytes_read"));
    for (const std::vector<std::string>& knobs :
         {std::vector<std::string>{"--stream"}, std::vector<std::string>{"--stream", "--ram-budget", "1M", "--no-direct"},
          std::vector<std::string>{"--stream", "--io-depth", "2", "--io-bw", "2G"}}) {
      std::vector<std::string> s = a;
      s.insert(s.end(), knobs.begin(), knobs.end());
      const nlohmann::json got = cli_json(s);
      CHECK(got.at("tokens").get<std::vector<int32_t>>() == want.at("tokens").get<std::vector<int32_t>>());
      for (size_t p = 0; p < 3; ++p) CHECK(got.at("logits")[p].get<std::vector<double>>() == want.at("logits")[p].get<std::vector<double>>());
      CHECK(got.at("stats").at("bytes_read").get<int64_t>() > 0);
      CHECK(got.at("stats").at("read_gbps").get<double>() > 0);
      CHECK(got.at("stats").at("io_busy").get<double>() > 0);
      CHECK(got.at("stats").contains("io_wait_ms"));
      // Bytes per token: what the passes after the prompt's read (the reads ahead between
      // passes included), over the tokens after the first. Each pass streams the same
      // layers, so no decode pass reads nothing.
      const nlohmann::json& st = got.at("stats");
      const int64_t decode = st.at("decode_bytes_read").get<int64_t>(), total = st.at("bytes_read").get<int64_t>();
      CHECK(decode > 0);
      CHECK(decode <= total);
      const int64_t generated = st.at("generated").get<int64_t>();
      REQUIRE(generated > 1);
      CHECK(st.at("bytes_read_per_token").get<double>() == doctest::Approx(double(decode) / double(generated - 1)));
      int64_t passes_sum = 0, decode_sum = 0;
      const nlohmann::json& timeline = st.at("timeline");
      for (size_t p = 0; p < timeline.size(); ++p) {
        const int64_t b = timeline[p].at("bytes_read").get<int64_t>();
        if (p > 0) CHECK(b > 0);
        passes_sum += b;
        decode_sum += p > 0 ? b : 0;
      }
      CHECK(decode_sum == decode);  // a 5-token prompt: one prefill pass
      CHECK(passes_sum <= total);
    }
  }
}

TEST_CASE("stream: a streamed speculative run pre-grows trees and reports a per-pass timeline") {
  // Throttled so that each pass waits for its weights: the draft thread then has time to
  // pre-grow (asked for: by default only a draft under 1/32 of the target's bytes does).
  const std::string model = model_path("stories260K-wide-q8_0");
  const std::string trace = (std::filesystem::temp_directory_path() /
                             ("fs-trace-" + std::to_string(getpid()) + ".json")).string();
  const std::vector<std::string> base = {"generate", "-m", model, "-p", "Once upon a time", "-n", "32",
                                         "--temp", "0", "--json", "--ignore-eos", "-t", "2"};
  const nlohmann::json want = cli_json(base);
  std::vector<std::string> a = base;
  a.insert(a.end(), {"-d", model_path("salty279K"), "--tree", "16", "--pregrow", "4", "--stream", "--io-bw", "100M",
                     "--trace", trace});
  const nlohmann::json got = cli_json(a);
  CHECK(got.at("tokens").get<std::vector<int32_t>>() == want.at("tokens").get<std::vector<int32_t>>());

  const nlohmann::json& st = got.at("stats");
  const auto& passes = st.at("timeline");
  REQUIRE(int64_t(passes.size()) == st.at("target_passes").get<int64_t>());
  double io_wait = 0;
  int64_t pregrown = 0;
  for (const nlohmann::json& p : passes) {
    io_wait += p.at("io_wait_ms").get<double>();
    pregrown += p.at("pregrown").get<int64_t>() > 0;
    CHECK(p.at("compute_ms").get<double>() == doctest::Approx(p.at("target_ms").get<double>() - p.at("io_wait_ms").get<double>()));
  }
  CHECK(io_wait > 0);
  CHECK(io_wait <= st.at("io_wait_ms").get<double>() + 1e-6);  // passes are part of the run
  CHECK(st.at("pregrow_ms").get<double>() > 0);
  CHECK(pregrown > 0);

  const nlohmann::json tr = read_json(trace);
  std::remove(trace.c_str());
  std::set<std::string> names;
  for (const nlohmann::json& e : tr.at("traceEvents")) names.insert(e.at("name").get<std::string>());
  CHECK(names.count("verify") == 1);
  CHECK(names.count("pre-grow") == 1);
  CHECK(names.count("weights") == 1);  // the storage track

  // Not asked for, a draft at a quarter of the target's bytes does not pre-grow.
  std::vector<std::string> by_default = base;
  by_default.insert(by_default.end(), {"-d", model_path("salty279K"), "--tree", "16", "--stream", "--io-bw", "100M"});
  const nlohmann::json plain = cli_json(by_default);
  CHECK(plain.at("tokens") == want.at("tokens"));
  CHECK(plain.at("stats").at("pregrow_ms").get<double>() == 0);
}

TEST_CASE("stream: CLI rejects bad streaming sizes with one line naming the flag") {
  const std::string model = model_path("stories260K");
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--ram-budget", "lots"}, {"--ram-budget", "-1G"}, {"--io-bw", "2Gx"}}) {
    const CliResult r = run_cli({"generate", "-m", model, "-p", "x", "-n", "2", "--stream", flag, value});
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(flag + ": '" + value + "' is not a size") != std::string::npos);
  }
  const CliResult r = run_cli({"inspect", model, "--stream", "--ram-budget", "nope"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--ram-budget: 'nope'") != std::string::npos);
}

TEST_CASE("stream: inspect shows the streaming plan for a budget") {
  const std::string model = model_path("stories260K-wide-q4_0");
  const nlohmann::json all = cli_json({"inspect", model, "--json", "--stream", "--ram-budget", "1G"});
  CHECK(all.at("placement").at("stream").at("n_resident").get<int64_t>() == 8);
  CHECK(all.at("placement").at("stream").at("ring_slots").get<int64_t>() == 0);
  const nlohmann::json none = cli_json({"inspect", model, "--json", "--stream"});
  const nlohmann::json& p = none.at("placement").at("stream");
  CHECK(p.at("n_resident").get<int64_t>() == 0);
  CHECK(p.at("ring_slots").get<int64_t>() == 2);
  CHECK(p.at("ring_over_budget").get<bool>());
  CHECK(p.at("layers").size() == 8);
  CHECK(none.at("placement").at("overhead").at("fixed_bytes").get<int64_t>() > 0);
  int64_t streamed = 0;
  for (const nlohmann::json& l : p.at("layers")) {
    CHECK(!l.at("resident").get<bool>());
    CHECK(l.at("read_bytes").get<int64_t>() % 4096 == 0);
    CHECK(l.at("read_bytes").get<int64_t>() >= l.at("tensor_bytes").get<int64_t>());
    streamed += l.at("read_bytes").get<int64_t>();
  }
  CHECK(p.at("streamed_bytes_per_pass").get<int64_t>() == streamed);
  for (const nlohmann::json& l : none.at("placement").at("layers")) CHECK(l.at("home").get<std::string>() == "streamed");
  // Without --stream a model this small is read through the mapping (larger ones are
  // copied into RAM at load, test_loaded_weights.cpp): no stream plan.
  const nlohmann::json resident = cli_json({"inspect", model, "--json"});
  CHECK(!resident.at("placement").contains("stream"));
  for (const nlohmann::json& l : resident.at("placement").at("layers")) CHECK(l.at("home").get<std::string>() == "mapped");
  const CliResult text = run_cli({"inspect", model, "--stream", "--ram-budget", "1M"});
  CHECK(text.out.find("placement (cpu, --stream)") != std::string::npos);
  CHECK(text.out.find("resident") != std::string::npos);
  CHECK(text.out.find("streamed") != std::string::npos);
}

TEST_CASE("stream: --tree auto verifies no pass whose activations go over --ram-budget") {
  // stories260K-wide-q8_0: 8 layers of at most 634880 bytes (read size). Alone, the budget holds
  // the ring and 4 layers. With salty279K drafting under --tree auto, the budget is larger by
  // the draft file (a claim on it), 64 rows of activations are kept out of the layers' reach
  // first (3 layers), and auto verifies at most the 95 rows that fit.
  const std::string model = model_path("stories260K-wide-q8_0"), draft = model_path("salty279K");
  CpuBackend be(1);
  const Model m(model, be);
  const uint64_t slot = 634880, per_row = Activations::bytes(m.config(), 1);
  const uint64_t draft_bytes = std::filesystem::file_size(draft);
  const uint64_t budget = 5 * slot + 95 * per_row + per_row / 2;  // 95 rows > 1 layer
  auto run = [&](uint64_t ram_budget, std::vector<std::string> extra) {
    std::vector<std::string> a = {"generate", "-m", model, "-p", "Once upon a time", "-n", "40", "--json",
                                  "--ignore-eos", "--temp", "0", "-t", "1", "--stream", "--ram-budget",
                                  std::to_string(ram_budget)};
    a.insert(a.end(), extra.begin(), extra.end());
    return cli_json(a);
  };
  const nlohmann::json alone = run(budget, {});
  CHECK(alone.at("placement").at("stream").at("n_resident").get<int64_t>() == 4);
  CHECK(alone.at("placement").at("stream").at("auto_rows_cap").get<int64_t>() == 0);

  const nlohmann::json got = run(budget + draft_bytes, {"-d", draft, "--tree", "auto"});
  CHECK(got.at("placement").at("draft").at("kind") == "file");
  CHECK(got.at("placement").at("draft").at("bytes").get<uint64_t>() == draft_bytes);
  const nlohmann::json& st = got.at("placement").at("stream");
  CHECK(st.at("n_resident").get<int64_t>() == 3);
  const uint64_t room = st.at("activation_bytes").get<uint64_t>();
  CHECK(room == budget - st.at("ring_bytes").get<uint64_t>() - st.at("resident_bytes").get<uint64_t>());
  const int64_t cap = st.at("auto_rows_cap").get<int64_t>();
  CHECK(cap > 64);
  CHECK(Activations::bytes(m.config(), cap) <= room);
  CHECK(Activations::bytes(m.config(), cap + 1) > room);
  CHECK(got.at("tokens") == alone.at("tokens"));  // lossless whatever the cap
  const nlohmann::json& tl = got.at("stats").at("timeline");
  for (size_t i = 1; i < tl.size(); ++i) CHECK(tl[i].at("tree_tokens").get<int64_t>() <= cap);

  // A --draft-max the room holds is not capped.
  CHECK(run(budget + draft_bytes, {"-d", draft, "--tree", "auto", "--draft-max", "16"})
            .at("placement").at("stream").at("auto_rows_cap").get<int64_t>() == 0);
  // The same budget without room for the draft: the layers get less (the draft counts).
  CHECK(run(budget, {"-d", draft, "--tree", "auto"}).at("placement").at("stream").at("n_resident").get<int64_t>() < 3);
}

TEST_CASE("stream: inspect shows the VRAM tier in front of the stream") {
  const std::string model = model_path("stories260K-wide-q4_0");  // 8 equal layers
  CpuBackend cpu(1);
  const Model m(model, cpu);
  const uint64_t layer = StagedLayers::packed_bytes(m.weights(), 0);
  // What VRAM holds besides the layers (embedding and head, KV cache, a pass's working
  // memory) comes out of the budget first.
  const nlohmann::json none = cli_json({"inspect", model, "--json", "--backend", "cuda", "--stream", "-ngl", "0"});
  const nlohmann::json& claims = none.at("placement").at("vram");
  const uint64_t others = claims.at("fixed_bytes").get<uint64_t>() + claims.at("context_bytes").get<uint64_t>() +
                          claims.at("pass_bytes").get<uint64_t>();
  CHECK(claims.at("fixed_bytes").get<uint64_t>() >= uint64_t(matrix_bytes(m.weights().embedding)));
  CHECK(claims.at("context_bytes").get<uint64_t>() > 0);
  CHECK(claims.at("total_bytes").get<uint64_t>() == others + 2 * layer);  // no layer resident: the 2 slots
  // Three layers and the two ring slots fit beside them; the stream then starts at layer 3.
  const std::string budget = std::to_string(others + 5 * layer);
  const nlohmann::json three = cli_json({"inspect", model, "--json", "--backend", "cuda", "--stream", "--vram-budget", budget});
  CHECK(three.at("placement").at("vram").at("n_layers").get<int64_t>() == 3);
  CHECK(three.at("placement").at("vram").at("slot_bytes").get<int64_t>() == int64_t(layer));
  CHECK(three.at("placement").at("vram").at("bytes").get<int64_t>() == int64_t(5 * layer));  // 3 layers + 2 slots
  CHECK(three.at("placement").at("vram").at("total_bytes").get<uint64_t>() == others + 5 * layer);
  CHECK(three.at("placement").at("vram").at("budget_bytes").get<uint64_t>() == others + 5 * layer);
  // A byte less: two layers.
  CHECK(cli_json({"inspect", model, "--json", "--backend", "cuda", "--stream", "--vram-budget",
                  std::to_string(others + 5 * layer - 1)})
            .at("placement").at("vram").at("n_layers").get<int64_t>() == 2);
  // A draft on the GPU comes out of the budget too: all its layers, and the rest it holds.
  const std::string draft = model_path("stories260K-wide-q8_0");
  const uint64_t draft_bytes =
      cli_json({"inspect", model, "--json", "--backend", "cuda", "--stream", "-ngl", "0", "-d", draft})
          .at("placement").at("vram").at("draft_bytes").get<uint64_t>();
  CHECK(draft_bytes > 8 * layer);  // its 8 layers are wider than the target's in q4_0
  const nlohmann::json drafted =
      cli_json({"inspect", model, "--json", "--backend", "cuda", "--stream", "--vram-budget",
                std::to_string(others + draft_bytes + 5 * layer), "-d", draft});
  CHECK(drafted.at("placement").at("vram").at("n_layers").get<int64_t>() == 3);
  CHECK(run_cli({"inspect", model, "--backend", "cuda", "--stream", "--vram-budget", budget, "-d", draft}).exit_code == 1);
  // Less than the slots need beside the rest: one error line that says what takes it.
  const CliResult small = run_cli({"inspect", model, "--backend", "cuda", "--stream", "--vram-budget", std::to_string(others)});
  CHECK(small.exit_code == 1);
  CHECK(small.err.find("--vram-budget") != std::string::npos);
  CHECK(small.err.find("KV cache") != std::string::npos);
  CHECK(small.err.find("-ngl 0") != std::string::npos);
  CHECK(std::count(small.err.begin(), small.err.end(), '\n') == 1);
  CHECK(three.at("placement").at("stream").at("first_layer").get<int64_t>() == 3);
  CHECK(three.at("placement").at("stream").at("layers").size() == 5);
  CHECK(three.at("placement").at("layers")[2].at("home").get<std::string>() == "vram");
  CHECK(three.at("placement").at("layers")[3].at("home").get<std::string>() == "streamed");
  // All of them fit: nothing left to stream.
  const nlohmann::json all = cli_json({"inspect", model, "--json", "--backend", "cuda", "--stream", "--vram-budget", "1G"});
  CHECK(all.at("placement").at("vram").at("n_layers").get<int64_t>() == 8);
  CHECK(all.at("placement").at("vram").at("slot_bytes").get<int64_t>() == 0);
  CHECK(!all.at("placement").contains("stream"));
  // -ngl: exactly that many layers.
  const nlohmann::json ngl = cli_json({"inspect", model, "--json", "--backend", "cuda", "-ngl", "6"});
  CHECK(ngl.at("placement").at("vram").at("n_layers").get<int64_t>() == 6);
  CHECK(ngl.at("placement").at("layers")[6].at("home").get<std::string>() == "mapped");
  const CliResult text = run_cli({"inspect", model, "--backend", "cuda", "--stream", "--vram-budget", budget});
  CHECK(text.out.find("0-2 vram") != std::string::npos);
  CHECK(text.out.find("layer   3:") != std::string::npos);
  CHECK(text.out.find("layer   2:") == std::string::npos);
  const CliResult bad = run_cli({"inspect", model, "--backend", "cuda", "--vram-budget", "much"});
  CHECK(bad.err.find("--vram-budget: 'much' is not a size") != std::string::npos);
  const CliResult cpu_vram = run_cli({"inspect", model, "--vram-budget", "1G"});
  CHECK(cpu_vram.exit_code == 2);
  CHECK(cpu_vram.err.find("needs --backend cuda") != std::string::npos);
}

// ---------------------------------------------------------------- peak RSS

// What --ram-budget leaves out, the memory plan states per part (MemoryPlan::overhead_bytes:
// the process, embedding and head, the KV cache of --ctx, a prefill pass): the peak stays
// within the budget plus that. The ring counts against the budget whenever the budget
// holds it; below that, the minimum ring (2 slots of the biggest layer) is an extra
// overhead, reported by inspect and the CLI as "over --ram-budget".
TEST_CASE("stream: peak RSS stays within the RAM budget plus the overhead the plan states, a draft file counted") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  MESSAGE("skipped: sanitizer builds carry shadow memory and quarantine in their RSS");
  return;
#endif
  const std::string python = "/usr/bin/python3";
  const std::string inflate = shared_dir() + "/tools/gguf_inflate.py";
  if (::access(python.c_str(), X_OK) != 0 || ::access(inflate.c_str(), R_OK) != 0 ||
      std::system((python + " -c 'import numpy' 2>/dev/null").c_str()) != 0) {
    MESSAGE("skipped: needs /usr/bin/python3 with numpy and " << inflate);
    return;
  }
  TempFile big("fs-stream-inflated");
  const std::string cmd = python + " " + inflate + " " + model_path("stories260K") + " " + big.path +
                          " --dim 1024 --ff 2816 --layers 24 --type q8_0 >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const uint64_t size = std::filesystem::file_size(big.path);
  REQUIRE(size > 250 * MiB);
  // A separate draft file (19 MB) counts against the budget too: the target's layers get
  // what it leaves.
  TempFile draft("fs-stream-draft");
  REQUIRE(std::system((python + " " + inflate + " " + model_path("stories260K") + " " + draft.path +
                       " --dim 512 --ff 1408 --layers 6 --type q8_0 >/dev/null").c_str()) == 0);
  const uint64_t draft_bytes = std::filesystem::file_size(draft.path);
  const uint64_t budget = 64'000'000;  // --ram-budget 64M
  for (const bool drafted : {false, true}) {
    CAPTURE(drafted);
    std::vector<std::string> args = {"generate", "-m", big.path, "-p", "Once upon a time", "-n", "4", "--stream",
                                     "--ram-budget", "64M", "--ctx", "16", "--json", "-t", "2"};
    if (drafted) args.insert(args.end(), {"-d", draft.path, "--tree", "4"});
    const CliResult r = run_cli(args, "", 120);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j.at("tokens").size() == 4);
    const nlohmann::json& plan = j.at("placement");
    const uint64_t layers = plan.at("stream").at("ring_bytes").get<uint64_t>() +
                            plan.at("stream").at("resident_bytes").get<uint64_t>();
    CHECK(plan.at("draft").at("bytes").get<uint64_t>() == (drafted ? draft_bytes : 0));
    CHECK(layers + (drafted ? draft_bytes : 0) <= budget);
    if (drafted) CHECK(r.err.find("the draft's 19.4 MB and the target's layers and ring") != std::string::npos);
    // Every pass streams the non-resident layers.
    CHECK(j.at("stats").at("bytes_read").get<int64_t>() > int64_t(size / 2));
    const uint64_t overhead = plan.at("overhead").at("bytes").get<uint64_t>();
    const long limit_kb = long((budget + overhead) / 1024);
    // The CLI's own peak (VmHWM): the wait4() figure would also count this test process's
    // pages, which the child carries from fork until exec.
    const long peak_kb = long(j.at("peak_rss_bytes").get<uint64_t>() / 1024);
    MESSAGE("model " << size / MiB << " MiB" << std::string(drafted ? ", 19 MB draft" : "") << ", --ram-budget 64M: peak RSS "
                     << peak_kb / 1024 << " MiB (limit " << limit_kb / 1024 << " MiB = budget + "
                     << overhead / MiB << " MiB stated overhead)");
    CHECK(peak_kb > 0);
    // The kernel's accounting of the whole child bounds it, up to the slack of its per-CPU
    // RSS counters: VmHWM and wait4's ru_maxrss each read them approximately (CI once saw
    // VmHWM 40 KiB above ru_maxrss), each off by at most a batch of pages per CPU per counter.
    constexpr long kRssCounterSlackKb = 1024;
    CHECK(peak_kb <= r.max_rss_kb + kRssCounterSlackKb);
    CHECK(peak_kb <= limit_kb);
  }
}
