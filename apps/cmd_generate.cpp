// `flashspec generate`: one prompt, target-only or speculative, text or JSON out.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "apps/commands.h"
#include "apps/json_writer.h"
#include "apps/run_options.h"
#include "apps/trace_writer.h"
#include "core/error.h"
#include "core/scheduler/generate.h"
#include "core/tokenizer.h"
#include "target/llama_model.h"

namespace flashspec {

namespace {

struct GenerateArgs {
  RunOptions run;
  std::string prompt;
  std::string prompt_file;
  bool json = false;
  int64_t logits = 0;
  std::string trace_path;
};

void print_stats_line(const GenerationStats& s) {
  std::fprintf(stderr,
               "\n[flashspec] prompt %lld tok, %.1f tok/s prefill | generated %lld tok, %.2f tok/s "
               "| ttft %.1f ms | passes %lld, tau %.2f\n",
               (long long)s.prompt_tokens, s.prefill_tokens_per_s(), (long long)s.generated,
               s.tokens_per_s(), s.ttft_ms, (long long)s.target_passes, s.tau());
}

void write_stats(JsonWriter& j, const GenerationStats& s) {
  j.key("stats").begin_object();
  j.field("prompt_tokens", s.prompt_tokens).field("generated", s.generated);
  j.field("target_passes", s.target_passes).field("drafted", s.drafted);
  j.field("accepted", s.accepted).field("tau", s.tau());
  j.field("accept_by_depth", s.accept_rate_by_depth());
  j.field("drafted_by_depth", s.drafted_by_depth).field("accepted_by_depth", s.accepted_by_depth);
  j.field("tokens_per_s", s.tokens_per_s()).field("prefill_tokens_per_s", s.prefill_tokens_per_s());
  j.field("ttft_ms", s.ttft_ms).field("prefill_ms", s.prefill_ms).field("decode_ms", s.decode_ms);
  j.field("bytes_read", s.bytes_read).field("read_gbps", s.read_gbps()).field("io_busy", s.io_busy());
  j.field("io_wait_ms", s.io_wait_ms).field("draft_ms", s.draft_ms).field("pregrow_ms", s.pregrow_ms);
  j.key("timeline").begin_array();
  for (const PassRecord& p : s.passes) {
    j.begin_object().field("start_ms", p.draft_start).field("draft_ms", p.draft_ms);
    j.field("target_ms", p.target_ms).field("io_wait_ms", p.io_wait_ms).field("compute_ms", p.compute_ms());
    j.field("pregrow_ms", p.pregrow_ms).field("draft_stall_ms", p.draft_stall_ms);
    j.field("pregrown", p.pregrown).field("tree_tokens", p.tree_tokens).field("emitted", p.emitted).end_object();
  }
  j.end_array();
  j.end_object();
}

int run_generate(const GenerateArgs& a) {
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) {
    std::ifstream in(a.prompt_file, std::ios::binary);
    if (!in) throw Error(a.prompt_file + ": cannot read prompt file");
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  Engine engine(a.run);
  const Tokenizer& tok = engine.tokenizer();
  const std::vector<int32_t> prompt_tokens = tok.encode(prompt, tok.add_bos());

  GenerateOptions opt = engine.generate_options();
  opt.logits_positions = a.logits;
  Utf8Stream stream;
  if (!a.json) {
    std::fputs(prompt.c_str(), stdout);
    opt.on_token = [&](int32_t id) {
      if (tok.is_end_of_generation(id)) return;  // the end marker is not text
      const std::string s = stream.push(tok.token_to_piece(id));
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    };
  }
  const GenerationResult r = engine.generate(prompt_tokens, opt);
  if (!a.trace_path.empty()) {
    std::ofstream out(a.trace_path, std::ios::binary);
    out << chrome_trace(r.stats);
    if (!out) throw Error(a.trace_path + ": cannot write the trace file");
  }
  if (!a.json) {
    std::fputs(stream.flush().c_str(), stdout);
    std::fputs("\n", stdout);
    print_stats_line(r.stats);
    return 0;
  }
  Utf8Stream text;
  std::vector<int32_t> shown = r.tokens;
  if (!shown.empty() && tok.is_end_of_generation(shown.back())) shown.pop_back();
  std::string generated = text.push(tok.decode(shown)) + text.flush();
  JsonWriter j;
  j.begin_object();
  j.field("prompt_tokens", prompt_tokens).field("tokens", r.tokens).field("text", generated);
  if (a.logits > 0) {
    j.key("logits").begin_array();
    for (const auto& row : r.logits) {
      j.begin_array();
      for (float v : row) j.value(double(v));
      j.end_array();
    }
    j.end_array();
  }
  write_stats(j, r.stats);
  j.end_object();
  std::printf("%s\n", j.str().c_str());
  return 0;
}

}  // namespace

Action register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt");
  add_run_options(*sub, args->run);
  sub->add_option("-p,--prompt", args->prompt, "prompt text");
  sub->add_option("-f,--file", args->prompt_file, "read the prompt from a file");
  sub->add_flag("--json", args->json, "print one JSON object instead of streaming text");
  sub->add_option("--trace", args->trace_path, "write a Chrome trace (JSON) of the passes to this file");
  sub->add_option("--logits", args->logits, "with --json: full logits of the first K generated positions")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  return [args] { return run_generate(*args); };
}

}  // namespace flashspec
