#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/printable.h"
#include "core/units.h"
#include "engine/quantize.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/quantize_fast.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda_loader.h"
#include "model/activations.h"
#include "model/kv_footprint.h"
#include "model/model.h"
#include "offload/weight_stream.h"
#include "target/loaded_layers.h"
#include "target/staged_layers.h"
#include "target/streamed_layers.h"
#include "tokenizer/vocab_compat.h"

namespace flashspec {

namespace {

void check_vocab_rows(const Tokenizer& tok, const Model& m, const std::string& path) {
  if (tok.n_vocab() != m.config().n_vocab)
    throw Error(printable(path) + ": tokenizer has " + std::to_string(tok.n_vocab()) + " tokens but the embedding has " +
                std::to_string(m.config().n_vocab) + " rows");
}

// What a run speculates with: the request's sizes as one node budget, and what the
// request leaves open decided from the run. `draft_share`: the draft's weight bytes over
// the target's (0: prompt lookup, no draft model).
SpeculationParams resolve_speculation(const SpeculationRequest& r, const EngineOptions& o, double draft_share,
                                      bool mtp = false) {
  const bool lookup_only = draft_share == 0.0 && !mtp;
  SpeculationParams p;
  p.mode = r.mode;
  p.node_budget = r.size();
  p.tree_width = r.tree_width;
  p.tree_children = r.tree_children;
  p.lookup = r.lookup || lookup_only;
  p.lookup_params = r.lookup_params;
  // Pre-growing by default only when the target streams and the draft is small. A
  // resident target on the CPU keeps every core busy, and a draft thread beside its pool
  // slows it more than it saves; a streamed pass waits for storage and leaves cores idle.
  // But a draft forward also reads its weights: a large draft growing beside a
  // verification competes for memory bandwidth and caches even at idle priority and
  // slows it, while a draft of a few hundred KB beside it costs nothing. Tree shapes then
  // depend on timing, but
  // the tokens do not: a tree's acceptance draws one target sample per emitted token, so
  // a seed reproduces a sampled run either way. Only greedy by default because
  // pre-growing has been benchmarked for greedy streamed runs only. Prompt lookup has no
  // draft model to grow anything.
  constexpr double kSmallDraftShare = 1.0 / 32;
  p.mtp = mtp;
  p.pregrow = lookup_only || mtp ? 0 : r.pregrow.value_or(o.placement.stream && o.greedy && draft_share <= kSmallDraftShare ? 4 : 0);
  // A large draft drafts on the critical path, a forward per tree level: wider levels,
  // fewer of them (a forward of 8 rows costs it little more than one of 4, and the trees
  // accept as much).
  if (draft_share > kSmallDraftShare) p.cheap_rows = 8;
  return p;
}

}  // namespace

std::optional<GgmlType> self_draft_type(const std::string& path) {
  if (path.rfind("self:", 0) != 0) return std::nullopt;
  const std::string name = path.substr(5);
  const std::optional<GgmlType> t = quantize_type_from_name(name);
  if (!t || !can_quantize_fast(*t))
    throw UsageError("-d " + printable(path) + ": a self-draft is the target quantized at load to q8_0, q4_0, q5_0 "
                     "or q5_1 (quantize to other types once with `flashspec quantize` and pass the file)");
  return t;
}

DraftKind draft_kind(const std::string& draft_path) {
  if (draft_path.empty()) return DraftKind::None;
  if (draft_path == kLookupDraft) return DraftKind::Lookup;
  if (draft_path == kMtpDraft) return DraftKind::Mtp;
  return draft_path.rfind("self:", 0) == 0 ? DraftKind::Self : DraftKind::File;
}

std::string no_mtp_layer(const std::string& path) {
  return "-d mtp: " + printable(path) + " has no MTP layer (no nextn_predict_layers, no blk.N.nextn.* tensors); "
         "only models that ship one (Qwen3.5/3.6) draft with it";
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  if (name != "cuda") return std::make_unique<CpuBackend>(threads);
  return load_cuda_backend(0);
}

Engine::Engine(const EngineOptions& o) : opt_(o) {
  const int threads = thread_count(o.threads);
  const std::optional<GgmlType> self_type = self_draft_type(o.draft_path);
  const DraftKind kind = draft_kind(o.draft_path);
  const bool mtp = kind == DraftKind::Mtp;
  backend_ = make_backend(o.backend, threads);
  target_ = std::make_unique<Model>(o.target_path, *backend_);
  target_->set_kv_types(o.k_type, o.v_type);
  target_->set_max_batch(o.batch);
  if (mtp && !target_->has_mtp()) throw Error(no_mtp_layer(o.target_path));
  tokenizer_ = Tokenizer::from_gguf(target_->file());
  check_vocab_rows(tokenizer_, *target_, o.target_path);
  // A self-draft is quantized from the target even when the target itself is quantized.
  const QuantizeOptions self_q = QuantizeOptions::self_draft(self_type.value_or(GgmlType::Q8_0));
  const uint64_t self_bytes = self_type ? quantized_model_bytes(target_->file(), self_q) : 0;
  if (kind == DraftKind::File || kind == DraftKind::Self) open_draft_backend(threads);
  if (kind == DraftKind::File) open_draft(o.draft_path);
  if (kind != DraftKind::None) {
    policy_ = resolve_speculation(o.speculation, o, draft_share(self_bytes), mtp);
    policy_->price_experts_by_bytes = o.moe.byte_pricing;
    policy_->prune_rows = o.moe.prune_rows;
    policy_->shape_by_forecast = o.moe.shape_by_forecast;
  }
  plan_ = plan_memory(target_->file(), target_->config(), target_->weights(), plan_request(self_bytes));
  place_target_layers();
  if (!policy_) return;
  if (plan_.auto_rows_cap) policy_->node_budget = plan_.auto_rows_cap;
  if (mtp) target_->place_mtp(plan_.mtp_experts_mapped);
  if (self_type) {
    ThreadPool pool(threads);
    self_draft_image_.reserve(size_t(self_bytes) + (size_t(1) << 20));
    quantize_model(target_->file(), self_q, pool, [&](std::span<const uint8_t> b) {
      self_draft_image_.insert(self_draft_image_.end(), b.begin(), b.end());
    });
    draft_ = std::make_unique<Model>(GgufFile::parse(self_draft_image_, o.draft_path + " of " + o.target_path),
                                     *draft_backend_);
    prepare_draft();
  } else if (draft_) {
    if (draft_backend_->host_memory() && plan_.draft_mapped_reason.empty()) load_into_memory(*draft_);
  }
  if (draft_ && !draft_backend_->host_memory()) keep_layers_in_backend(*draft_);
  set_tree_rows();
}

void Engine::open_draft_backend(int threads) {
  // On the CPU every core, at the lowest priority: drafting before a pass is on the
  // critical path with the cores otherwise idle, and pre-growing beside a verification
  // then takes only the cycles the target leaves while it waits for storage (at equal
  // priority it slowed a streamed verification). On a GPU its own stream, so that it can
  // overlap the target's passes.
  draft_backend_ = opt_.backend == "cuda" ? make_backend(opt_.backend, 1)
                                          : std::make_unique<CpuBackend>(threads, ThreadPool::Priority::Background);
}

void Engine::open_draft(const std::string& path) {
  draft_ = std::make_unique<Model>(path, *draft_backend_);
  prepare_draft();
  const Tokenizer draft_tok = Tokenizer::from_gguf(draft_->file());
  check_vocab_rows(draft_tok, *draft_, path);
  check_vocab_compatible(draft_tok, path, tokenizer_, opt_.target_path);
}

void Engine::prepare_draft() {
  draft_->set_kv_types(opt_.k_type, opt_.v_type);
  draft_->set_max_batch(opt_.batch);
}

double Engine::draft_share(uint64_t self_bytes) const {
  const double target = double(target_->file().file_size());
  if (opt_.draft_path == kMtpDraft) return double(target_->weights().mtp_forward_bytes()) / target;
  if (self_bytes) return double(self_bytes) / target;
  return draft_ ? double(draft_->file().file_size()) / target : 0.0;
}

PlanRequest Engine::plan_request(uint64_t self_bytes) const {
  PlanRequest r;
  r.placement = opt_.placement;
  r.gpu = !backend_->host_memory();
  if (!r.gpu) r.memory_available = probe_host_memory().available();
  r.draft = draft_kind(opt_.draft_path);
  // A draft file's weights in VRAM take no host memory.
  if (r.draft == DraftKind::Self) r.draft_bytes = self_bytes;
  if (r.draft == DraftKind::File && draft_backend_->host_memory()) r.draft_bytes = draft_->file().file_size();
  if (policy_ && policy_->auto_budget()) r.auto_rows = policy_->node_budget;
  if (policy_ && !policy_->auto_budget()) r.fixed_rows = policy_->max_verified() + 1;
  r.sequences = std::max<int64_t>(opt_.parallel, 1);
  r.context = usable_context();
  r.batch = opt_.batch;
  r.key_type = opt_.k_type;
  r.value_type = opt_.v_type;
  if (draft_) {
    r.draft_weights = &draft_->weights();
    r.draft_config = &draft_->config();
  }
  if (policy_) r.draft_tree_factor = 1 + policy_->pregrow_factor();
  return r;
}

void Engine::set_tree_rows() {
  // Windowed layers' rings keep room for a whole tree's pending rows (target: the verified
  // rows, pre-grown ones and the root; draft: every node it grows).
  target_->set_max_tree_rows(policy_->max_verified() + policy_->max_tree_nodes() + 2);
  if (draft_) draft_->set_max_tree_rows(policy_->max_tree_nodes() + 2);
}

Engine::~Engine() = default;

void Engine::place_target_layers() {
  Model& t = *target_;
  const int64_t n = plan_.n_layers();
  std::unique_ptr<LayerSource> host;  // layers outside VRAM, in host memory
  if (plan_.stream) {
    StreamOptions so;
    static_cast<IoOptions&>(so) = opt_.placement.io;
    so.sure_guesses = opt_.moe.sure_guesses;
    so.shared_cache = opt_.moe.shared_cache;
    auto streamed = std::make_unique<StreamedLayers>(t.file(), t.weights(), *plan_.stream, so, plan_.n_vram);
    stream_ = &streamed->stream();
    t.set_token_guess(opt_.moe.token_guess);
    t.read_per_layer_inputs_from_storage(opt_.placement.io);  // Gemma 4's table stays on storage too
    host = std::move(streamed);
  }
  if (!plan_.gpu) {
    // Resident layers are copied out of the mapping at load, where the plan found room
    // (the head too, also beside streamed layers: it is read every pass).
    if (host) {
      t.set_layer_source(std::move(host));
      if (!opt_.placement.mmap.value_or(false)) t.load_head_into_memory();
    } else if (plan_.mapped_reason.empty()) {
      load_into_memory(t);
    }
    return;
  }
  // The mapping never reuses a layer's memory, so the host may run ahead of the copies;
  // the weight stream recycles the layer it lent at its next acquire.
  const int64_t holds = host ? StagedLayers::kStreamHolds : StagedLayers::kNeverRecycled;
  if (!host && plan_.n_vram < n) host = std::make_unique<ResidentLayers>(t.weights());
  try {
    t.set_layer_source(std::make_unique<StagedLayers>(t.weights(), t.placed().vectors, *backend_, std::move(host),
                                                      plan_.n_vram, holds));
  } catch (const Error& e) {
    if (opt_.placement.vram_budget || opt_.placement.gpu_layers) throw;
    throw Error(std::string(e.what()) + "; --vram-budget SIZE or -ngl N keeps only the layers that fit");
  }
}

Session Engine::new_session(int64_t ctx) {
  return Session(*target_, draft_.get(), policy_, ctx, learned_policy());
}

std::unique_ptr<BatchSession> Engine::new_batch(int64_t max_sequences, int64_t ctx, int64_t prefill_rows,
                                               int64_t kv_rows) {
  const ModelConfig& c = target_->config();
  const uint64_t per_position = kv_footprint(c, target_->key_type(), target_->value_type(), ctx, 1).token_bytes();
  if (kv_rows == 0 && opt_.kv_budget > 0) {
    kv_rows = int64_t(opt_.kv_budget / per_position);
    if (kv_rows < BatchSession::kKvBlockRows)
      throw Error("--kv-budget " + std::to_string(opt_.kv_budget) + " bytes holds less than one block of " +
                  std::to_string(BatchSession::kKvBlockRows) + " positions (" + std::to_string(per_position) +
                  " bytes each)");
  } else if (kv_rows == 0 && target_->backend().host_memory()) {
    kv_rows = default_kv_pool_rows(ctx * max_sequences, per_position, probe_host_memory().available(),
                                   BatchSession::kKvBlockRows);
  }
  return std::make_unique<BatchSession>(*target_, draft_.get(), policy_, ctx, max_sequences, prefill_rows, kv_rows);
}

int64_t Engine::context_for(int64_t prompt, int64_t n_predict) const {
  if (opt_.ctx > 0 && prompt + n_predict > opt_.ctx)
    throw Error("--ctx " + std::to_string(opt_.ctx) + " is too small: a " + std::to_string(prompt) +
                "-token prompt plus " + std::to_string(n_predict) + " tokens need " + std::to_string(prompt + n_predict));
  return (opt_.ctx > 0 ? opt_.ctx : prompt + n_predict) + scratch_rows();
}

int64_t Engine::usable_context() const {
  return opt_.ctx > 0 ? opt_.ctx : std::min(target_->config().context_length, kDefaultSessionContext);
}

int64_t Engine::session_context() const { return usable_context() + scratch_rows(); }

int64_t Engine::tokens_left(int64_t used) const {
  const int64_t left = usable_context() - used;
  if (left <= 0)
    throw Error("context full: " + std::to_string(used) + " tokens leave no room for an answer in the context of " +
                std::to_string(usable_context()) + " (raise --ctx)");
  return left;
}

TurnResult Engine::generate(std::span<const int32_t> prompt, const TurnRequest& r) {
  Session s = new_session(context_for(int64_t(prompt.size()), r.max_tokens));
  TurnResult out = run_turn(*this, s, prompt, r);
  if (const BudgetPolicy* p = s.budget_policy()) learned_ = *p;
  return out;
}

std::optional<uint64_t> Engine::peak_device_bytes() const {
  std::optional<uint64_t> peak = backend_->peak_memory_bytes();
  if (draft_backend_ && peak)
    if (const std::optional<uint64_t> d = draft_backend_->peak_memory_bytes()) *peak += *d;
  return peak;
}

StreamCounters Engine::stream_counters() const {
  if (!stream_) return StreamCounters{};
  StreamCounters c = stream_->counters();
  // Gemma 4's per-layer embedding rows come from storage too, through a reader of their own.
  if (const PleRows* ple = target_->per_layer_rows()) c.bytes_read += ple->bytes_read();
  return c;
}

void Engine::add_stream_stats(GenerationStats& s, const StreamCounters& before) const {
  if (!stream_) return;
  set_stream_stats(s, stream_counters().since(before));
}

}  // namespace flashspec
