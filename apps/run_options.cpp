#include "apps/run_options.h"

#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "core/units.h"
#include "core/vocab_compat.h"
#include "kernels/cpu/cpu_backend.h"
#include "target/llama_model.h"

namespace flashspec {

void add_run_options(CLI::App& sub, RunOptions& o) {
  sub.add_option("-m,--model", o.target_path, "target model (GGUF)")->required();
  sub.add_option("-d,--draft", o.draft_path, "draft model (GGUF) for speculative decoding");
  sub.add_option("-n,--n-predict", o.n_predict, "tokens to generate")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
  sub.add_option("--temp", o.sampling.temperature, "temperature (0: greedy)")
      ->check(CLI::Range(0.0f, 100.0f));
  sub.add_option("--seed", o.sampling.seed, "sampling seed");
  sub.add_option("--top-k", o.sampling.top_k, "top-k filter (0: off)")->check(CLI::Range(0, 1 << 24));
  sub.add_option("--top-p", o.sampling.top_p, "top-p filter (1: off)")->check(CLI::Range(0.0f, 1.0f));
  sub.add_option("--min-p", o.sampling.min_p, "min-p filter (0: off)")->check(CLI::Range(0.0f, 1.0f));
  sub.add_option("--chain", o.chain, "speculate with a chain of K draft tokens")
      ->check(CLI::Range(int64_t(1), int64_t(4096)));
  sub.add_option("--tree", o.tree, "speculate with a draft tree of B tokens, or 'auto'");
  sub.add_option("--tree-width", o.tree_width, "tree nodes the draft expands per pass (0: budget/16)")
      ->check(CLI::Range(0, 4096));
  sub.add_option("--tree-children", o.tree_children, "candidate children kept per tree node")
      ->check(CLI::Range(1, 4096));
  sub.add_option("--backend", o.backend, "compute backend")->check(CLI::IsMember({"cpu", "cuda"}));
  sub.add_option("-t,--threads", o.threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));
  sub.add_option("-c,--ctx", o.ctx, "context size in tokens (default: what the run needs)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  sub.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-sequence");
  sub.add_flag("--stream", o.stream, "stream target layers from storage");
  sub.add_option("--ram-budget", o.ram_budget, "RAM for resident target layers, e.g. 2G");
  sub.add_option("--vram-budget", o.vram_budget, "VRAM for resident target layers");
  sub.add_option("--io-depth", o.io_depth, "io_uring queue depth")->check(CLI::Range(1, 4096));
  sub.add_option("--io-bw", o.io_bw, "storage bandwidth cap in bytes/s, e.g. 2.1G");
  sub.add_flag("--no-direct", o.no_direct, "buffered reads instead of O_DIRECT");
}

Engine::Engine(const RunOptions& o) : opt_(o) {
  if (o.backend == "cuda")
    throw Error("--backend cuda: this build of flashspec has no CUDA backend");
  if ((o.chain > 0 || !o.tree.empty()) && o.draft_path.empty())
    throw Error("--chain/--tree need a draft model (-d DRAFT.gguf)");
  if (o.chain > 0 && !o.tree.empty()) throw Error("--chain and --tree are exclusive");
  if (o.stream) throw Error("--stream: weight streaming is not available in this build yet");
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  backend_ = std::make_unique<CpuBackend>(threads);
  target_ = std::make_unique<LlamaModel>(o.target_path, *backend_);
  tokenizer_ = Tokenizer::from_gguf(target_->file());
  check_vocab_rows(tokenizer_, *target_, o.target_path);
  if (o.draft_path.empty()) return;
  draft_ = std::make_unique<LlamaModel>(o.draft_path, *backend_);
  const Tokenizer draft_tok = Tokenizer::from_gguf(draft_->file());
  check_vocab_rows(draft_tok, *draft_, o.draft_path);
  check_vocab_compatible(draft_tok, o.draft_path, tokenizer_, o.target_path);
  DraftPolicy p;
  p.expand_width = o.tree_width;
  p.max_children = o.tree_children;
  if (o.chain > 0) {
    p.shape = DraftPolicy::Shape::Chain;
    p.budget = o.chain;
    p.sampled = !o.sampling.greedy();
  } else if (o.tree.empty()) {
    p.budget = 64;  // a draft alone means the default tree
  } else if (o.tree == "auto") {
    p.auto_budget = true;
    p.budget = 1024;  // the largest budget auto may choose
  } else {
    char* end = nullptr;
    const long long b = std::strtoll(o.tree.c_str(), &end, 10);
    if (end == o.tree.c_str() || *end != '\0' || b < 1 || b > 65536)
      throw Error("--tree: '" + o.tree + "' is not a budget in 1..65536 or 'auto'");
    p.budget = b;
  }
  policy_ = p;
}

Engine::~Engine() = default;

void Engine::check_vocab_rows(const Tokenizer& tok, const LlamaModel& m, const std::string& path) {
  if (tok.n_vocab() != m.config().n_vocab)
    throw Error(path + ": tokenizer has " + std::to_string(tok.n_vocab()) +
                " tokens but the embedding has " + std::to_string(m.config().n_vocab) + " rows");
}

GenerateOptions Engine::generate_options() const {
  GenerateOptions g;
  g.n_predict = opt_.n_predict;
  g.sampling = opt_.sampling;
  g.ignore_eos = opt_.ignore_eos;
  g.is_end = [this](int32_t id) { return tokenizer_.is_end_of_generation(id); };
  return g;
}

GenerationResult Engine::generate(const std::vector<int32_t>& prompt, const GenerateOptions& g) {
  const int64_t need = context_needed(int64_t(prompt.size()), g.n_predict, Session::scratch_rows(policy_));
  if (opt_.ctx > 0 && need > opt_.ctx)
    throw Error("--ctx " + std::to_string(opt_.ctx) + " is too small for a " +
                std::to_string(prompt.size()) + "-token prompt plus " + std::to_string(g.n_predict) +
                " tokens");
  Session s = new_session(need);
  return s.generate(prompt, g);
}

Session Engine::new_session(int64_t default_ctx) {
  return Session(*target_, draft_.get(), policy_, opt_.ctx > 0 ? opt_.ctx : default_ctx);
}

}  // namespace flashspec
