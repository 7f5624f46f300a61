// Storage that slows down mid-run (a competing reader started beside the stream): --tree
// auto's prices follow the new rate within a few passes, and speculation over a streamed
// mixture of experts stays lossless while its reads are slowed (row pruning, which is
// priced by the measured read time, then drops other rows than it would have).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/budget_policy.h"
#include "tests/fixtures.h"
#include "tests/streamed_moe_pair.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// Reads `path` from start to end over and over (O_DIRECT where the file system allows
// it, so that it competes for the device rather than for the page cache) until destroyed.
class CompetingReader {
 public:
  explicit CompetingReader(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd_ >= 0);
    thread_ = std::thread([this] { run(); });
  }
  ~CompetingReader() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  CompetingReader(const CompetingReader&) = delete;
  CompetingReader& operator=(const CompetingReader&) = delete;
  int64_t bytes() const { return bytes_; }

 private:
  void run() {
    constexpr size_t kBlock = size_t(1) << 20;
    std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(4096, kBlock)), &std::free);
    off_t at = 0;
    while (!stop_) {
      const ssize_t n = ::pread(fd_, buf.get(), kBlock, at);
      if (n < 0) return;
      at = n == ssize_t(kBlock) ? at + n : 0;  // a short read is the end of the file: start over
      bytes_ += n;
    }
  }
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> bytes_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("storage slowdown: a streamed mixture of experts' pass price follows a 3x slower disk within a few passes") {
  // One-row passes of the 35B-A3B shape as the stream measures them: 320 experts routed,
  // 420 MB read, 85 ms of compute; the disk reads at 2.2 GB/s, then a competing reader
  // leaves it a third of that.
  BudgetPolicy policy(64, 0.1, ExpertShape{40, 64, 8});
  const auto pass = [&](double ms_per_byte) {
    const double read_ms = 420e6 * ms_per_byte, ms = std::max(read_ms, 85.0) + 40.0;
    policy.observe_pass(1, ms, ms - 85.0, 320);
    policy.observe_expert_pass({ms, ms - 85.0, 320, 420'000'000, ms_per_byte, false});
    policy.observe_storage(read_ms);
    return ms;
  };
  const double fast = 1.0 / 2.2e6, slow = 3.0 / 2.2e6;
  double ms = 0;
  for (int i = 0; i < 20; ++i) ms = pass(fast);
  CHECK(policy.verify_ms(0) == doctest::Approx(ms).epsilon(0.02));
  std::vector<double> error;  // |predicted - measured| / measured after each slow pass
  for (int i = 0; i < 12; ++i) {
    ms = pass(slow);
    error.push_back(std::abs(policy.verify_ms(0) - ms) / ms);
  }
  MESSAGE("price error after each slow pass: " << error[0] << " " << error[1] << " " << error[2] << " " << error[3]);
  CHECK(error[3] < 0.2);   // within 20% after four passes
  CHECK(error[11] < 0.03);  // and settled within a dozen
  // A tree's price moves with it: two rows still cost well under twice one.
  CHECK(policy.verify_ms(1) > policy.verify_ms(0));
  CHECK(policy.verify_ms(1) < 2 * policy.verify_ms(0));
}

TEST_CASE("storage slowdown: --tree auto over a streamed mixture of experts stays lossless beside a competing reader") {
  StreamedMoePair m(32);
  // The competitor starts as the 12th token is final: the slowdown lands mid-run.
  std::unique_ptr<CompetingReader> competitor;
  GenerateOptions o = greedy(32);
  int64_t emitted = 0;
  o.on_token = [&](int32_t) {
    if (++emitted == 12) competitor = std::make_unique<CompetingReader>(model_path("tiny-qwen3moe"));
  };
  const GenerationResult got = generate_speculative(m.target, m.draft, m.prompt, o, StreamedMoePair::auto_tree());
  CHECK(got.tokens == m.want.tokens);
  REQUIRE(competitor);
  int64_t before = 0, after = 0;  // tokens emitted so far; target bytes streamed once the competitor read
  for (const PassRecord& r : got.stats.passes) {
    if (before >= 12) after += r.bytes_read;
    before += r.emitted;
  }
  CHECK(after > 0);
  CHECK(competitor->bytes() > 0);  // the competitor did read beside the stream
}
