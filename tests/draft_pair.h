#pragma once
// A target and the salty279K draft loaded for speculation tests, each on its own CPU
// backend (the draft's of one thread, as in the CLI: pre-growing runs it on its own thread).
#include <string>

#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace flashspec::testing {

struct DraftPair {
  CpuBackend backend;
  CpuBackend draft_backend{1};
  Model target, draft;
  Tokenizer tok;
  explicit DraftPair(const std::string& target_name = "stories260K", int target_threads = 2)
      : backend(target_threads),
        target(model_path(target_name), backend),
        draft(model_path("salty279K"), draft_backend),
        tok(Tokenizer::from_gguf(target.file())) {}
};

}  // namespace flashspec::testing
