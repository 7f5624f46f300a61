#pragma once
// Test fixtures are JSON files (llama.cpp references, the CLI's output): read with
// nlohmann-json, as the engine writes them.
#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>

namespace flashspec::testing {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  return nlohmann::json::parse(in);
}

}  // namespace flashspec::testing
