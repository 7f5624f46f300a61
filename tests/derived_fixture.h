#pragma once
// Fixtures derived from made ones for one test process: a copy edited through GgufWriter
// (a near copy to draft with, a vocabulary cut for sampling tests' thousands of runs).
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/ggml_type.h"
#include "core/gguf.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"

namespace flashspec::testing {

// A copy of `src` changed by `edit`, written once per process under `key` (removed at exit).
inline const std::string& derived_fixture(const std::string& key, const std::string& src,
                                          const std::function<void(GgufWriter&)>& edit) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<TempFile>> files;
  std::lock_guard lock(mutex);
  if (auto it = files.find(key); it != files.end()) return it->second->path;
  auto f = std::make_unique<TempFile>("fs-" + key);
  GgufWriter w = GgufWriter::from(GgufFile::open(src));
  edit(w);
  w.write(f->path);
  return files.emplace(key, std::move(f)).first->second->path;
}

// Every value of every F32 tensor blk.L.<suffix> (where the layer has one) through `f`.
inline void transform_tensors(GgufWriter& w, const std::string& suffix, const std::function<float(float)>& f) {
  int changed = 0;
  for (int l = 0; l < 64; ++l) {
    TensorSpec* t = w.tensor("blk." + std::to_string(l) + "." + suffix);
    if (!t) continue;
    REQUIRE(t->type == uint32_t(GgmlType::F32));
    float* v = reinterpret_cast<float*>(t->data.data());
    for (size_t i = 0; i < t->data.size() / sizeof(float); ++i) v[i] = f(v[i]);
    ++changed;
  }
  REQUIRE(changed > 0);
}

inline void scale_tensors(GgufWriter& w, const std::string& suffix, float factor) {
  transform_tensors(w, suffix, [factor](float v) { return v * factor; });
}

// The vocabulary (embedding, and the output head where it is not tied) cut to its first
// `rows` ids: the same layers at a fraction of the head's cost per row, for the sampling
// tests' thousands of runs. The tokenizer keys are left as they are (the model reads n_vocab
// from token_embd).
inline void cut_vocabulary(GgufWriter& w, uint64_t rows) {
  for (const char* name : {"token_embd.weight", "output.weight"}) {
    TensorSpec* t = w.tensor(name);
    if (!t) continue;
    const size_t row_bytes = t->data.size() / t->dims[1];
    t->dims[1] = rows;
    t->data.resize(size_t(rows) * row_bytes);
  }
  REQUIRE(w.tensor("token_embd.weight") != nullptr);
}

}  // namespace flashspec::testing
