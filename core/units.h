#pragma once
// Human sizes and rates: parsed from flags ("512M", "2.1G", "1.5GiB", "0": decimal
// suffixes K/M/G/T are powers of 1000, KiB/MiB/GiB/TiB powers of 1024) and written for
// plans and stats ("12.6 MB", decimal).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashspec {

// nullopt on anything that is not a non-negative finite number with an optional suffix.
std::optional<double> parse_size(std::string_view s);

// "12.6 MB": three significant figures or so, decimal units.
std::string format_bytes(uint64_t bytes);

}  // namespace flashspec
