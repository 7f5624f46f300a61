#pragma once
// The placement flags, declared once for every command that places a target (generate,
// chat, bench, serve, throughput, inspect, and flashspec-iobench's stream flags): where
// the layers live (--stream, --vram-budget, -ngl, --mmap / --no-mmap) and how streamed
// layers are read (--ram-budget, --io-depth, --io-bw, --no-direct). One meaning
// everywhere: the stream's flags need --stream (refused rather than ignored) where the
// command has that flag, and the VRAM flags need --backend cuda.
#include <CLI/CLI.hpp>
#include <string>

#include "target/placement_options.h"

namespace flashspec {

// A SIZE value (512M, 2.1G, 1GiB, 0), turned into its bytes at parse time.
CLI::Validator size_value();

// --stream, the stream's flags, the VRAM flags and --mmap / --no-mmap, into `p`.
void add_placement_flags(CLI::App& sub, PlacementOptions& p);
// The stream's flags alone, each needing `stream` when given (null: a command that
// always streams).
void add_stream_flags(CLI::App& sub, PlacementOptions& p, CLI::Option* stream);
// --mmap / --no-mmap (PlacementOptions::mmap).
void add_mmap_flag(CLI::App& sub, PlacementOptions& p);
// After parsing: UsageError for VRAM flags on a backend without VRAM.
void check_placement_flags(const PlacementOptions& p, const std::string& backend);

}  // namespace flashspec
