#pragma once
// Paths of the shared fixtures (models, llama.cpp references) and of the built CLI.
#include <string>

namespace flashspec::testing {

inline std::string model_path(const std::string& name) {
  return std::string(FS_SHARED_DIR) + "/models/" + name + ".gguf";
}
inline std::string reference_path(const std::string& name) {
  return std::string(FS_SHARED_DIR) + "/reference/" + name + ".llamacpp.json";
}
inline std::string cli_path() { return FS_CLI_PATH; }

}  // namespace flashspec::testing
