// flashspec-iobench: streams every layer of a model file through the weight stream
// (offload/), pass after pass, with no compute in between, and reports the read rate.
// scripts/bench-io.sh runs it next to fio on the same file, request size and depth.
//
//   flashspec-iobench MODEL.gguf [--passes N] [--io-depth N] [--request-size 1M]
//                     [--io-bw 2.1G] [--ram-budget SIZE] [--no-direct] [--json]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <optional>

#include "core/error.h"
#include "core/gguf.h"
#include "core/llama_config.h"
#include "core/units.h"
#include "offload/stream_source.h"
#include "target/model_weights.h"

namespace {

using namespace flashspec;

uint64_t size_arg(const std::string& flag, const std::string& v) {
  const std::optional<double> b = parse_size(v);
  if (!b || *b > 1e18) throw Error(flag + ": '" + v + "' is not a size (e.g. 512K, 1M, 2.1G)");
  return uint64_t(*b);
}

struct Args {
  std::string model;
  int passes = 3;
  int io_depth = 8;
  std::string request = "1MiB", io_bw = "0", ram_budget = "0";
  bool no_direct = false, json = false;
};

int run(const Args& a) {
  const GgufFile f = GgufFile::open(a.model);
  const LlamaConfig c = LlamaConfig::from_gguf(f);
  const ModelWeights w(f, c);
  StreamOptions o;
  o.io_depth = a.io_depth;
  o.request_bytes = size_arg("--request-size", a.request);
  o.io_bw = double(size_arg("--io-bw", a.io_bw));
  o.ram_budget = size_arg("--ram-budget", a.ram_budget);
  o.direct = !a.no_direct;
  o.expected_file_size = f.file_size();
  const int64_t n_layers = int64_t(w.layer_tensors().size());

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  WeightStream ws(a.model, layer_extents(w), o);
  const auto t1 = Clock::now();  // resident layers loaded, ring filling
  for (int p = 0; p < a.passes; ++p)
    for (int64_t l = 0; l < n_layers; ++l) {
      ws.acquire(l);
      ws.release(l);
    }
  const auto t2 = Clock::now();
  const StreamCounters s = ws.counters();
  const double secs = std::chrono::duration<double>(t2 - t1).count();
  const double consumed = double(ws.plan().streamed_bytes) * a.passes;
  const double gbps = secs > 0 ? consumed / secs / 1e9 : 0;
  if (a.json) {
    std::printf(
        "{\"model\":\"%s\",\"file_bytes\":%llu,\"passes\":%d,\"io_depth\":%d,\"request_bytes\":%llu,"
        "\"direct\":%s,\"io_bw\":%.0f,\"resident_layers\":%d,\"streamed_bytes_per_pass\":%llu,"
        "\"seconds\":%.4f,\"gbps\":%.4f,\"bytes_read\":%llu,\"read_busy_ms\":%.2f,\"read_gbps\":%.4f,"
        "\"io_busy\":%.4f,\"io_wait_ms\":%.2f,\"resident_load_ms\":%.2f,\"open_ms\":%.2f}\n",
        a.model.c_str(), (unsigned long long)f.file_size(), a.passes, a.io_depth,
        (unsigned long long)o.request_bytes, ws.direct() ? "true" : "false", o.io_bw, ws.plan().n_resident,
        (unsigned long long)ws.plan().streamed_bytes, secs, gbps, (unsigned long long)s.bytes_read,
        s.read_busy_ms, s.read_gbps(), secs > 0 ? s.read_busy_ms / (secs * 1e3) : 0.0, s.io_wait_ms,
        s.resident_load_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    return 0;
  }
  std::printf("%s: %d passes x %s streamed (%d of %lld layers resident), %s, depth %d x %s%s\n",
              a.model.c_str(), a.passes, format_bytes(ws.plan().streamed_bytes).c_str(), ws.plan().n_resident,
              (long long)n_layers, ws.direct() ? "O_DIRECT" : "buffered", a.io_depth,
              format_bytes(o.request_bytes).c_str(),
              o.io_bw > 0 ? (", capped at " + format_bytes(uint64_t(o.io_bw)) + "/s").c_str() : "");
  std::printf("  %.3f s: %.3f GB/s (consumed bytes / wall time); %.3f GB/s while reading, I/O busy %.1f%%\n",
              secs, gbps, s.read_gbps(), secs > 0 ? 100.0 * s.read_busy_ms / (secs * 1e3) : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("flashspec-iobench: read rate of the weight stream (offload/)");
  app.add_option("model", a.model, "GGUF model file")->required();
  app.add_option("--passes", a.passes, "passes over every layer")->check(CLI::Range(1, 100000));
  app.add_option("--io-depth", a.io_depth, "io_uring queue depth")->check(CLI::Range(1, 4096));
  app.add_option("--request-size", a.request, "bytes per read request, e.g. 1M");
  app.add_option("--io-bw", a.io_bw, "bandwidth cap in bytes/s, e.g. 1G (0: none)");
  app.add_option("--ram-budget", a.ram_budget, "RAM for resident layers and the ring");
  app.add_flag("--no-direct", a.no_direct, "buffered reads instead of O_DIRECT");
  app.add_flag("--json", a.json, "one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashspec-iobench: %s\n", e.what());
    return 1;
  }
}
