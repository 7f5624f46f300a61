#pragma once
// The fixtures with an MTP layer (the trained ones, tests/fixtures/NAME.gguf) and their
// PyTorch references of the MTP layer's logits (tests/reference/NAME.mtp.json).
#include <string>
#include <vector>

namespace flashspec::testing {

inline const std::vector<std::string>& mtp_fixture_names() {
  static const std::vector<std::string> names = {"trained-qwen35", "trained-qwen35moe"};
  return names;
}
inline std::string mtp_fixture_path(const std::string& name) {
  return std::string(FS_SOURCE_DIR) + "/tests/fixtures/" + name + ".gguf";
}
inline std::string mtp_reference_path(const std::string& name) {
  return std::string(FS_SOURCE_DIR) + "/tests/reference/" + name + ".mtp.json";
}

}  // namespace flashspec::testing
