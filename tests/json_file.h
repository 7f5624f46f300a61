#pragma once
// Test fixtures are JSON files (llama.cpp references, the CLI's output): read with
// nlohmann-json, as the engine writes them.
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace flashspec::testing {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  return nlohmann::json::parse(in);
}

// The same, keeping objects' key order (what tojson prints in chat template references).
inline nlohmann::ordered_json read_ordered_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  return nlohmann::ordered_json::parse(in);
}

// One JSON value per non-empty line (--json output of chat and generate).
inline std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> v;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

}  // namespace flashspec::testing
