#include "apps/run_options.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/units.h"
#include "core/vocab_compat.h"
#include "kernels/cpu/cpu_backend.h"
#include "offload/stream_source.h"
#include "target/llama_model.h"

namespace flashspec {

// ---- weight streaming (offload/): --stream, --ram-budget, --io-depth, --io-bw, --no-direct ----
namespace {

uint64_t size_flag(const std::string& flag, const std::string& v) {
  if (v.empty()) return 0;
  const std::optional<double> b = parse_size(v);
  if (!b || *b > 1e18) throw Error(flag + ": '" + v + "' is not a size (e.g. 512M, 2.1G, 1GiB)");
  return uint64_t(*b);
}

// Makes the target stream its layers from its file; returns the stream (owned by the model).
WeightStream* attach_stream(LlamaModel& target, const RunOptions& o) {
  StreamOptions so;
  so.ram_budget = size_flag("--ram-budget", o.ram_budget);
  so.io_bw = double(size_flag("--io-bw", o.io_bw));
  so.io_depth = o.io_depth;
  so.direct = !o.no_direct;
  auto src = std::make_unique<StreamedLayers>(target.file(), target.weights(), so);
  WeightStream& ws = src->stream();
  const LayerPlan& p = ws.plan();
  std::fprintf(stderr,
               "[flashspec] streaming %s: %d of %zu layers resident (%s), ring %d x %s%s, %s read "
               "per pass, %s, depth %d x %s%s\n",
               o.target_path.c_str(), p.n_resident, p.layers.size(), format_bytes(p.resident_bytes).c_str(),
               p.ring_slots, format_bytes(p.slot_bytes).c_str(),
               p.ring_over_budget() ? " (minimum ring, over the budget)" : "",
               format_bytes(p.streamed_bytes).c_str(), ws.direct() ? "O_DIRECT" : "buffered", so.io_depth,
               format_bytes(so.request_bytes).c_str(),
               so.io_bw > 0 ? (", capped at " + format_bytes(uint64_t(so.io_bw)) + "/s").c_str() : "");
  target.set_layer_source(std::move(src));
  return &ws;
}

}  // namespace

void Engine::add_stream_stats(GenerationStats& s, const StreamCounters& before) const {
  if (!stream_) return;
  const StreamCounters d = stream_->counters().since(before);
  s.bytes_read = int64_t(d.bytes_read);
  s.read_busy_ms = d.read_busy_ms;
  s.io_wait_ms = d.io_wait_ms;
}

static void print_stream_stats(const GenerationStats& s) {
  std::fprintf(stderr,
               "\n[flashspec] stream: %s read, %.2f GB/s while reading, I/O busy %.0f%%, compute waited "
               "%.1f ms for weights\n",
               format_bytes(uint64_t(s.bytes_read)).c_str(), s.read_gbps(), 100.0 * s.io_busy(), s.io_wait_ms);
}
// ---- end of weight streaming ----

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
  sub.add_option("--pregrow", o.pregrow,
                 "trees: while the target verifies B nodes, the draft grows up to B x N more on its "
                 "own thread for the next pass (0: no overlap; default 4 with --stream and greedy "
                 "decoding, else 0)")
      ->check(CLI::Range(0, 64));
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
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  backend_ = std::make_unique<CpuBackend>(threads);
  target_ = std::make_unique<LlamaModel>(o.target_path, *backend_);
  if (o.stream) stream_ = attach_stream(*target_, o);  // weight streaming (offload/)
  tokenizer_ = Tokenizer::from_gguf(target_->file());
  check_vocab_rows(tokenizer_, *target_, o.target_path);
  if (o.draft_path.empty()) return;
  // One thread: the draft is small, and with pre-growing it runs beside the target's pool.
  draft_backend_ = std::make_unique<CpuBackend>(1);
  draft_ = std::make_unique<LlamaModel>(o.draft_path, *draft_backend_);
  const Tokenizer draft_tok = Tokenizer::from_gguf(draft_->file());
  check_vocab_rows(draft_tok, *draft_, o.draft_path);
  check_vocab_compatible(draft_tok, o.draft_path, tokenizer_, o.target_path);
  DraftPolicy p;
  p.expand_width = o.tree_width;
  p.max_children = o.tree_children;
  // Default: pre-grow only when the target streams. A resident target on the CPU keeps
  // every core busy, and a draft thread beside its pool slows it more than it saves
  // (measured: 2x slower on 2 cores with a small resident target); a streamed pass waits
  // for storage and leaves cores idle. Tree shapes then depend on timing, but the tokens
  // do not: a tree's acceptance draws one target sample per emitted token, so a --seed
  // reproduces a sampled run either way. Only greedy by default because pre-growing has
  // been benchmarked for greedy streamed runs only.
  p.pregrow = o.pregrow >= 0 ? o.pregrow : (o.stream && o.sampling.greedy() ? 4 : 0);
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
  const int64_t need = context_needed(int64_t(prompt.size()), g.n_predict, scratch_rows());
  if (opt_.ctx > 0 && need > opt_.ctx)
    throw Error("--ctx " + std::to_string(opt_.ctx) + " is too small for a " +
                std::to_string(prompt.size()) + "-token prompt plus " + std::to_string(g.n_predict) +
                " tokens");
  Session s = new_session(need);
  const StreamCounters before = stream_ ? stream_->counters() : StreamCounters{};
  GenerationResult r = s.generate(prompt, g);
  if (stream_) {
    add_stream_stats(r.stats, before);
    print_stream_stats(r.stats);
  }
  return r;
}

Session Engine::new_session(int64_t default_ctx) {
  return Session(*target_, draft_.get(), policy_, opt_.ctx > 0 ? opt_.ctx : default_ctx);
}

}  // namespace flashspec
