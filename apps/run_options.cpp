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
#include "target/staged_layers.h"
#ifdef FLASHSPEC_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace flashspec {

// ---- weight streaming (offload/): --stream, --ram-budget, --io-depth, --io-bw, --no-direct ----
namespace {

uint64_t size_flag(const std::string& flag, const std::string& v) {
  if (v.empty()) return 0;
  const std::optional<double> b = parse_size(v);
  if (!b || *b > 1e18) throw Error(flag + ": '" + v + "' is not a size (e.g. 512M, 2.1G, 1GiB)");
  return uint64_t(*b);
}

void print_stream_plan(const RunOptions& o, const WeightStream& ws, const StreamOptions& so) {
  const LayerPlan& p = ws.plan();
  std::fprintf(stderr,
               "[flashspec] streaming %s: %d of %zu streamed layers resident in RAM (%s), ring %d x %s%s, "
               "%s read per pass, %s, depth %d x %s%s\n",
               o.target_path.c_str(), p.n_resident, p.layers.size(), format_bytes(p.resident_bytes).c_str(),
               p.ring_slots, format_bytes(p.slot_bytes).c_str(),
               p.ring_over_budget() ? " (minimum ring, over the budget)" : "",
               format_bytes(p.streamed_bytes).c_str(), ws.direct() ? "O_DIRECT" : "buffered", so.io_depth,
               format_bytes(so.request_bytes).c_str(),
               so.io_bw > 0 ? (", capped at " + format_bytes(uint64_t(so.io_bw)) + "/s").c_str() : "");
}

// Sets where the target's layers come from: the mapping or the weight stream (--stream),
// and for a GPU backend the VRAM tier in front of them (--vram-budget). Returns the
// stream (owned by the model) or nullptr.
WeightStream* attach_layers(LlamaModel& target, Backend& be, const RunOptions& o) {
  const int64_t n_layers = target.config().n_layers;
  int64_t in_vram = 0;
  if (!be.host_memory()) {
    in_vram = o.vram_budget.empty()
                  ? n_layers
                  : StagedLayers::resident_layers_for(target.weights(), size_flag("--vram-budget", o.vram_budget));
    std::fprintf(stderr, "[flashspec] %s: %lld of %lld layers resident in VRAM%s\n", o.target_path.c_str(),
                 (long long)in_vram, (long long)n_layers,
                 in_vram < n_layers ? (o.stream ? ", the rest streamed through 2 VRAM slots"
                                                : ", the rest copied from RAM through 2 VRAM slots")
                                    : "");
  }
  std::unique_ptr<LayerSource> host;
  WeightStream* ws = nullptr;
  if (o.stream && in_vram < n_layers) {
    StreamOptions so;
    so.ram_budget = size_flag("--ram-budget", o.ram_budget);
    so.io_bw = double(size_flag("--io-bw", o.io_bw));
    so.io_depth = o.io_depth;
    so.direct = !o.no_direct;
    auto streamed = std::make_unique<StreamedLayers>(target.file(), target.weights(), so, in_vram);
    ws = &streamed->stream();
    print_stream_plan(o, *ws, so);
    host = std::move(streamed);
  } else if (o.stream) {
    std::fprintf(stderr, "[flashspec] --stream: every layer fits the VRAM budget; nothing to stream\n");
  }
  if (be.host_memory()) {
    if (host) target.set_layer_source(std::move(host));
  } else {
    if (!host && in_vram < n_layers) host = std::make_unique<ResidentLayers>(target.weights());
    try {
      target.set_layer_source(std::make_unique<StagedLayers>(target.weights(), target.placed().vectors, be,
                                                             std::move(host), in_vram));
    } catch (const Error& e) {
      if (!o.vram_budget.empty()) throw;
      throw Error(std::string(e.what()) + "; --vram-budget SIZE keeps only the layers that fit");
    }
  }
  return ws;
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

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  if (name != "cuda") return std::make_unique<CpuBackend>(threads);
#ifdef FLASHSPEC_HAVE_CUDA
  return cuda::make_backend(0);
#else
  throw Error("--backend cuda: this build of flashspec has no CUDA backend (nvcc was not found when it was configured)");
#endif
}

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
  sub.add_option("--kv-type", o.kv_type, "KV cache element type (f32: no rounding, twice the memory)")
      ->check(CLI::IsMember({"f16", "f32"}));
  sub.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-sequence");
  sub.add_flag("--stream", o.stream, "stream target layers from storage");
  sub.add_option("--ram-budget", o.ram_budget, "RAM for resident target layers, e.g. 2G");
  sub.add_option("--vram-budget", o.vram_budget, "VRAM for resident target layers");
  sub.add_option("--io-depth", o.io_depth, "io_uring queue depth")->check(CLI::Range(1, 4096));
  sub.add_option("--io-bw", o.io_bw, "storage bandwidth cap in bytes/s, e.g. 2.1G");
  sub.add_flag("--no-direct", o.no_direct, "buffered reads instead of O_DIRECT");
}

Engine::Engine(const RunOptions& o) : opt_(o) {
  if (!o.vram_budget.empty() && o.backend != "cuda") throw Error("--vram-budget needs --backend cuda");
  if ((o.chain > 0 || !o.tree.empty()) && o.draft_path.empty())
    throw Error("--chain/--tree need a draft model (-d DRAFT.gguf)");
  if (o.chain > 0 && !o.tree.empty()) throw Error("--chain and --tree are exclusive");
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  backend_ = make_backend(o.backend, threads);
  const KvType kv_type = o.kv_type == "f32" ? KvType::F32 : KvType::F16;
  target_ = std::make_unique<LlamaModel>(o.target_path, *backend_);
  target_->set_kv_type(kv_type);
  stream_ = attach_layers(*target_, *backend_, o);  // weight streaming (offload/), VRAM tier
  tokenizer_ = Tokenizer::from_gguf(target_->file());
  check_vocab_rows(tokenizer_, *target_, o.target_path);
  if (o.draft_path.empty()) return;
  // On the CPU one thread: the draft is small, and with pre-growing it runs beside the
  // target's pool. On a GPU its own stream, so that it can overlap the target's passes.
  draft_backend_ = make_backend(o.backend, 1);
  draft_ = std::make_unique<LlamaModel>(o.draft_path, *draft_backend_);
  draft_->set_kv_type(kv_type);
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
