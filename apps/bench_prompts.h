#pragma once
// apps/ holds the programs: the `flashspec` CLI (one cmd_*.cpp per command, registered
// in commands.h, and the flags, inputs and reports the commands share), its HTTP server
// (apps/server/), and the benchmark tools (iobench/, grammarbench/, gpubench/).
//
// The prompt sets `flashspec bench` reads: its own JSON lines ({"prompt": ...}),
// Spec-Bench's questions ({"question_id", "category", "turns": [...]}: the first turn,
// rendered with the target's chat template) and plain text, one prompt per line.
#include <cstdint>
#include <string>
#include <vector>

namespace flashspec {

struct BenchPrompt {
  std::string text;
  std::string category;  // Spec-Bench's category; empty where the file has none
  bool chat = false;     // a user's turn for the chat template (Spec-Bench), else raw text
};

// Reads PATH. A file whose first non-blank line starts with '{' is JSON lines, each with a
// "prompt" string or Spec-Bench's "turns" (and "category"); any other file is plain text,
// one prompt per non-blank line. Error (one line, naming the file and line) on a bad line
// or a file without prompts.
std::vector<BenchPrompt> load_bench_prompts(const std::string& path);

// At most n prompts (n <= 0: all). Without categories, the first n; with them, taken in
// turn from each category in the order categories first appear, so that every category
// is represented as evenly as n allows (26 of Spec-Bench's 13 categories: 2 each).
std::vector<BenchPrompt> sample_prompts(const std::vector<BenchPrompt>& all, int64_t n);

// The categories of `prompts` in order of first appearance (empty when none has one).
std::vector<std::string> categories_of(const std::vector<BenchPrompt>& prompts);

// The shipped prompt set: next to the executable, in ../share/flashspec, or in the source
// tree this binary was built from (source_dir, empty for none).
std::string default_prompts_path(const std::string& source_dir);

}  // namespace flashspec
