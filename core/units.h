#pragma once
// Parsing of human sizes and rates ("512M", "2.1G", "1.5GiB", "0"): decimal suffixes
// K/M/G/T are powers of 1000, KiB/MiB/GiB/TiB powers of 1024.
#include <optional>
#include <string_view>

namespace flashspec {

// nullopt on anything that is not a non-negative finite number with an optional suffix.
std::optional<double> parse_size(std::string_view s);

}  // namespace flashspec
