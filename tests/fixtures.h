#pragma once
// Paths of the shared fixtures (models, llama.cpp references), of the fixtures the project
// makes itself, and of the built CLI.
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

namespace flashspec::testing {

// The shared fixtures' folder: $FLASHSPEC_SHARED_DIR when set (the scripts' variable; it lets
// a test binary run on another machine, scripts/gpu-pack.sh), else the build's.
inline std::string shared_dir() {
  const char* env = std::getenv("FLASHSPEC_SHARED_DIR");
  return env && *env ? std::string(env) : std::string(FS_SHARED_DIR);
}
inline std::string model_path(const std::string& name) { return shared_dir() + "/models/" + name + ".gguf"; }
inline std::string reference_path(const std::string& name) {
  return shared_dir() + "/reference/" + name + ".llamacpp.json";
}
inline std::string cli_path() { return FS_CLI_PATH; }

// A fixture model the project makes itself ("tiny-qwen35", "tiny-qwen35moe": random weights
// around the shared Qwen3 tokenizer; "tiny-gemma3": around Gemma 3's tokenizer from the npm
// package tests/tokenizers pins; from tests/make_fixtures.cpp), in FS_FIXTURE_DIR
// (build/fixtures). scripts/make-fixtures.sh makes them all, at most once per process: when
// the file is missing, or older than the generator (rebuilt since: its output may differ).
// The generator renames each finished file into place, so concurrent test processes never
// read a half-written one. std::runtime_error when the file is still missing or stale after
// the script (which fails, say, for tiny-gemma3 without npm, after making the Qwen files).
inline std::string made_fixture_path(const std::string& name) {
  namespace fs = std::filesystem;
  const std::string path = std::string(FS_FIXTURE_DIR) + "/" + name + ".gguf";
  auto current = [&] {
    std::error_code ec;
    const auto made = fs::last_write_time(path, ec);
    if (ec) return false;  // missing
    const auto generator = fs::last_write_time(FS_MAKE_FIXTURES_BIN, ec);
    return ec || made >= generator;
  };
  static std::mutex mutex;
  static bool ran = false;
  static std::string failure;  // the script's command and status when it failed
  const std::string cmd = "FS_MAKE_FIXTURES_BIN='" FS_MAKE_FIXTURES_BIN "' FLASHSPEC_SHARED_DIR='" + shared_dir() +
                          "' '" FS_SOURCE_DIR "/scripts/make-fixtures.sh' '" FS_FIXTURE_DIR "'";
  std::lock_guard lock(mutex);
  if (!ran && !current()) {
    ran = true;
    const int rc = std::system(cmd.c_str());
    if (rc != 0) failure = cmd + " failed (status " + std::to_string(rc) + ")";
  }
  if (!current())
    throw std::runtime_error("made_fixture_path(\"" + name + "\"): " +
                             (failure.empty() ? "no current " + path + " after " + cmd + " (not a fixture it makes?)"
                                              : failure));
  return path;
}

}  // namespace flashspec::testing
