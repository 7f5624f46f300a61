#include "apps/bench_prompts.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string_view>

#include <nlohmann/json.hpp>

#include "apps/text_input.h"
#include "core/error.h"
#include "core/json_bounds.h"
#include "core/printable.h"

namespace flashspec {

namespace {

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

// Calls f(line number, line) for each non-blank line, '\r' of CRLF files dropped.
template <class F>
void for_each_line(const std::string& text, F f) {
  size_t pos = 0;
  for (int64_t n = 1; pos < text.size(); ++n) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!blank(line)) f(n, line);
  }
}

BenchPrompt json_prompt(std::string_view line, const std::string& where) {
  if (const std::optional<std::string> e = json_bounds_error(line)) throw Error(where + *e);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "not a JSON object (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(where + "not a JSON object");
  BenchPrompt p;
  if (auto c = j.find("category"); c != j.end() && c->is_string()) p.category = c->get<std::string>();
  if (auto it = j.find("prompt"); it != j.end() && it->is_string()) {
    p.text = it->get<std::string>();
    return p;
  }
  // Spec-Bench: the first turn is the prompt (later turns answer the model's reply,
  // which a benchmark of one generation does not have).
  auto turns = j.find("turns");
  if (turns == j.end() || !turns->is_array() || turns->empty() || !(*turns)[0].is_string())
    throw Error(where + "no \"prompt\" string and no \"turns\" list of strings (Spec-Bench's questions)");
  p.text = (*turns)[0].get<std::string>();
  p.chat = true;
  return p;
}

}  // namespace

std::vector<BenchPrompt> load_bench_prompts(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<BenchPrompt> prompts;
  bool json = false, first = true;
  for_each_line(text, [&](int64_t n, std::string_view line) {
    if (first) json = line.substr(line.find_first_not_of(" \t")).starts_with("{"), first = false;
    if (json)
      prompts.push_back(json_prompt(line, printable(path) + ":" + std::to_string(n) + ": "));
    else
      prompts.push_back({std::string(line), "", false});
  });
  if (prompts.empty())
    throw Error(printable(path) + ": no prompts (expected one prompt per line, JSON lines like {\"prompt\": \"...\"} or "
                                  "Spec-Bench's questions)");
  return prompts;
}

std::vector<std::string> categories_of(const std::vector<BenchPrompt>& prompts) {
  std::vector<std::string> out;
  for (const BenchPrompt& p : prompts)
    if (!p.category.empty() && std::find(out.begin(), out.end(), p.category) == out.end()) out.push_back(p.category);
  return out;
}

std::vector<BenchPrompt> sample_prompts(const std::vector<BenchPrompt>& all, int64_t n) {
  if (n <= 0 || int64_t(all.size()) <= n) return all;
  const std::vector<std::string> cats = categories_of(all);
  if (cats.empty()) return {all.begin(), all.begin() + n};
  // Each category's prompts in file order (those without one form a category of their own).
  std::map<std::string, std::vector<const BenchPrompt*>> by_cat;
  for (const BenchPrompt& p : all) by_cat[p.category].push_back(&p);
  std::vector<std::string> order = cats;
  if (by_cat.count("")) order.push_back("");
  std::vector<BenchPrompt> out;
  for (size_t round = 0; int64_t(out.size()) < n; ++round)
    for (const std::string& c : order)
      if (round < by_cat[c].size() && int64_t(out.size()) < n) out.push_back(*by_cat[c][round]);
  return out;
}

std::string default_prompts_path(const std::string& source_dir) {
  std::vector<std::filesystem::path> where;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    where.push_back(exe.parent_path() / "bench_prompts.jsonl");
    where.push_back(exe.parent_path() / ".." / "share" / "flashspec" / "bench_prompts.jsonl");
  }
  if (!source_dir.empty()) where.push_back(std::filesystem::path(source_dir) / "apps" / "bench_prompts.jsonl");
  std::string looked;
  for (const auto& p : where) {
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
    looked += (looked.empty() ? "" : ", ") + p.string();
  }
  throw Error("bench: the default prompt set was not found (looked in " + looked + "); pass --prompts FILE");
}

}  // namespace flashspec
