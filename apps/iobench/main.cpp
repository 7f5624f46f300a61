// flashspec-iobench: streams every layer of a model file through the weight stream
// (offload/), pass after pass, with no compute in between, and reports the read rate.
// scripts/bench-io.sh runs it next to fio on the same file, request size and depth.
//
//   flashspec-iobench MODEL.gguf [--passes N] [--io-depth N] [--request-size 8M]
//                     [--io-bw 2.1G] [--ram-budget SIZE] [--no-direct] [--json]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "apps/placement_flags.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/units.h"
#include "engine/engine.h"
#include "offload/weight_stream.h"
#include "model/model.h"

namespace {

using namespace flashspec;

struct Args {
  std::string model;
  int passes = 3;
  bool json = false;
  PlacementOptions placement;  // the stream's flags, as every command reads them
};

int run(const Args& a) {
  EngineOptions eo;
  eo.target_path = a.model;
  eo.threads = 1;
  eo.placement = a.placement;
  eo.placement.stream = true;

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Engine engine(eo);  // opens the stream: resident layers read, ring filling
  WeightStream& ws = *engine.stream();
  const auto t1 = Clock::now();
  const int64_t n_layers = int64_t(ws.plan().layers.size());
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
  const uint64_t file_bytes = engine.target().file().file_size();
  if (a.json) {
    const nlohmann::json j = {{"model", a.model},
                              {"file_bytes", file_bytes},
                              {"passes", a.passes},
                              {"io_depth", eo.placement.io.depth},
                              {"request_bytes", eo.placement.io.request_bytes},
                              {"direct", ws.direct()},
                              {"io_bw", eo.placement.io.bandwidth},
                              {"resident_layers", ws.plan().n_resident},
                              {"streamed_bytes_per_pass", ws.plan().streamed_bytes},
                              {"seconds", secs},
                              {"gbps", gbps},
                              {"bytes_read", s.bytes_read},
                              {"read_busy_ms", s.read_busy_ms},
                              {"read_gbps", s.read_gbps()},
                              {"io_busy", secs > 0 ? s.read_busy_ms / (secs * 1e3) : 0.0},
                              {"io_wait_ms", s.io_wait_ms},
                              {"resident_load_ms", s.resident_load_ms},
                              {"open_ms", std::chrono::duration<double, std::milli>(t1 - t0).count()}};
    std::printf("%s\n", j.dump().c_str());
    return std::fflush(stdout) == 0 && !std::ferror(stdout) ? 0 : 1;
  }
  std::printf("%s: %d passes x %s streamed (%d of %lld layers resident), %s, depth %d x %s%s\n", a.model.c_str(),
              a.passes, format_bytes(ws.plan().streamed_bytes).c_str(), ws.plan().n_resident, (long long)n_layers,
              ws.direct() ? "O_DIRECT" : "buffered", eo.placement.io.depth, format_bytes(eo.placement.io.request_bytes).c_str(),
              eo.placement.io.bandwidth > 0 ? (", capped at " + format_bytes(eo.placement.io.bandwidth) + "/s").c_str() : "");
  std::printf("  %.3f s: %.3f GB/s (consumed bytes / wall time); %.3f GB/s while reading, I/O busy %.1f%%\n", secs,
              gbps, s.read_gbps(), secs > 0 ? 100.0 * s.read_busy_ms / (secs * 1e3) : 0.0);
  return std::fflush(stdout) == 0 && !std::ferror(stdout) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("flashspec-iobench: read rate of the weight stream (offload/)");
  app.add_option("model", a.model, "GGUF model file")->required();
  app.add_option("--passes", a.passes, "passes over every layer")->check(CLI::Range(1, 100000));
  app.add_option("--request-size", a.placement.io.request_bytes, "bytes per read request, e.g. 1M")
      ->transform(size_value());
  add_stream_flags(app, a.placement, nullptr);
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
