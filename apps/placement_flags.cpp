#include "apps/placement_flags.h"

#include <optional>

#include "core/error.h"
#include "core/units.h"

namespace flashspec {

CLI::Validator size_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const std::optional<double> b = parse_size(s);
        if (!b || *b > 1e18) return "'" + s + "' is not a size (e.g. 512M, 2.1G, 1GiB, 0)";
        s = std::to_string(uint64_t(*b));
        return {};
      },
      "SIZE");
}

void add_placement_flags(CLI::App& sub, PlacementOptions& p) {
  CLI::Option* stream = sub.add_flag("--stream", p.stream, "stream target layers from storage");
  add_stream_flags(sub, p, stream);
  CLI::Option* vram = sub.add_option_function<uint64_t>(
                             "--vram-budget", [&p](const uint64_t& v) { p.vram_budget = v; },
                             "with --backend cuda: all the VRAM flashspec may take (the draft, KV caches and a pass's working memory "
                             "first, then as many target layers as fit; default: every layer resident)")
                          ->transform(size_value());
  CLI::Option* ngl = sub.add_option_function<int64_t>(
                            "--gpu-layers,--n-gpu-layers", [&p](const int64_t& v) { p.gpu_layers = v; },
                            "with --backend cuda: this many leading target layers in VRAM, the rest staged through "
                            "two VRAM slots (llama.cpp: -ngl)")
                         ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  vram->excludes(ngl);
  add_mmap_flag(sub, p);
}

void add_stream_flags(CLI::App& sub, PlacementOptions& p, CLI::Option* stream) {
  const std::string with = stream ? "with --stream: " : "";
  CLI::Option* added[] = {
      sub.add_option("--ram-budget", p.ram_budget, with + "RAM for the target's resident layers and read ring, the draft and a pass's activations, e.g. 2G (embedding, head and KV cache come on top: inspect shows the plan)")
          ->transform(size_value()),
      sub.add_option("--io-depth", p.io.depth, with + "io_uring requests in flight")
          ->check(CLI::Range(1, 4096))
          ->capture_default_str(),
      sub.add_option("--io-bw", p.io.bandwidth, with + "storage bandwidth cap in bytes/s, e.g. 2.1G (0: none)")
          ->transform(size_value()),
      sub.add_flag_function("--no-direct", [&p](int64_t) { p.io.direct = false; },
                            with + "buffered reads instead of O_DIRECT"),
      sub.add_option_function<int64_t>(
             "--expert-cache", [&p](const int64_t& n) { p.expert_cache = n; },
             with + "a mixture of experts: an expert cache of exactly N slots per layer (0: none; default: as many "
                    "as --ram-budget leaves room for)")
          ->check(CLI::Range(int64_t(0), int64_t(1) << 20)),
  };
  if (stream)
    for (CLI::Option* o : added) o->needs(stream);
}

void add_mmap_flag(CLI::App& sub, PlacementOptions& p) {
  CLI::Option* on = sub.add_flag_function("--mmap", [&p](int64_t) { p.mmap = true; },
                                          "CPU: read resident weights through the file mapping (starts at once)");
  CLI::Option* off = sub.add_flag_function("--no-mmap", [&p](int64_t) { p.mmap = false; },
                                           "CPU: copy resident weights into memory at load (decodes faster; the "
                                           "default for models over 64 MB that fit in the memory available)");
  on->excludes(off);
}

void check_placement_flags(const PlacementOptions& p, const std::string& backend) {
  if (backend != "cuda" && (p.vram_budget || p.gpu_layers))
    throw UsageError(std::string(p.gpu_layers ? "--gpu-layers (-ngl)" : "--vram-budget") +
                     " needs --backend cuda (it places target layers in VRAM)");
}

}  // namespace flashspec
