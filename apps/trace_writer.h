#pragma once
// Per-pass timeline of a generation as a Chrome trace (chrome://tracing, Perfetto):
// one row for the target (verification, with its waits for weights), one for the draft
// (trees grown before a pass on the critical path, and pre-growing beside a pass), so
// the overlap (or its absence) is visible.
#include <string>

#include "apps/json_writer.h"
#include "core/stats.h"

namespace flashspec {

inline std::string chrome_trace(const GenerationStats& s) {
  JsonWriter j;
  j.begin_object().key("traceEvents").begin_array();
  auto event = [&](const char* name, int tid, double start_ms, double dur_ms, int64_t tokens,
                   double io_wait_ms) {
    if (dur_ms <= 0) return;
    j.begin_object().field("name", name).field("ph", "X").field("pid", int64_t(1)).field("tid", int64_t(tid));
    j.field("ts", start_ms * 1000.0).field("dur", dur_ms * 1000.0);
    j.key("args").begin_object().field("tokens", tokens);
    if (io_wait_ms > 0) j.field("io_wait_ms", io_wait_ms);
    j.end_object();
    j.end_object();
  };
  for (const PassRecord& p : s.passes) {
    event("draft tree", 2, p.draft_start, p.draft_ms, p.tree_tokens - 1, 0);
    event("target pass", 1, p.target_start, p.target_ms, p.tree_tokens, p.io_wait_ms);
    event("draft pre-grows", 2, p.target_start, p.pregrow_ms, 0, 0);
    event("draft stall", 1, p.target_start + p.target_ms, p.draft_stall_ms, 0, 0);
  }
  j.end_array().end_object();
  return j.str();
}

}  // namespace flashspec
