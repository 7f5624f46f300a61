// `flashspec inspect`: what a GGUF file holds and where the engine would put every layer
// under the given placement flags (the same plan `generate` runs), plus the KV cache's
// bytes per token and the ops the backend would run through the host.
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <span>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/inspect_routing.h"
#include "apps/output.h"
#include "apps/run_options.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/host_memory.h"
#include "core/model_config.h"
#include "core/units.h"
#include "engine/engine.h"
#include "engine/quantize.h"
#include "kernels/cuda_loader.h"
#include "kernels/host_fallback.h"
#include "model/kv_footprint.h"
#include "model/model.h"
#include "model/model_weights.h"
#include "model/recurrent_state.h"
#include "target/memory_plan.h"
#include "tokenizer/tokenizer.h"

namespace flashspec {

namespace {

struct InspectArgs {
  std::string path;
  std::string draft;  // self:TYPE shows the self-draft's size and its share of the budget
  bool json = false;
  std::string backend = "cpu";
  KvTypeFlags kv_types;
  int64_t ctx = 0;
  PlacementOptions placement;
  RoutingRunArgs routing;  // --routing: routing statistics instead of the file's description
};

// A mixture-of-experts model's size: all parameters vs those one token uses (every
// tensor but the experts, plus experts_used of each layer's experts; of an embedding table
// that is not also the head, the one row a token looks up: model cards count active
// parameters so, gpt-oss-20b's 3.6 B among them), and the layer bytes a token reads (dense
// parts and its experts; the embedding and head stay resident).
struct MoeSummary {
  int64_t params_total = 0, params_active = 0;
  uint64_t dense_bytes = 0, expert_bytes = 0;
};

MoeSummary moe_summary(const GgufFile& f, const ModelConfig& c, const ModelWeights& w) {
  MoeSummary m;
  int64_t expert_params = 0;  // the experts' matrices and their biases (gpt-oss): GGUF names them *_exps.*
  for (const auto& t : f.tensors()) {
    m.params_total += t.elements();
    if (t.name.find("_exps.") != std::string::npos) expert_params += t.elements();
  }
  if (!c.moe()) return m;
  for (int64_t l = 0; l < w.n_layers(); ++l)
    for (const LayerMatrixTensor& x : w.layer_matrices(l)) {
      if (x.spec.experts > 1)
        m.expert_bytes += x.tensor->nbytes / uint64_t(x.spec.experts) * uint64_t(c.n_experts_used);
      else
        m.dense_bytes += x.tensor->nbytes;
    }
  const int64_t unread_embedding = c.tied_output ? 0 : (c.n_vocab - 1) * c.dim;
  m.params_active = m.params_total - expert_params / c.n_experts * (c.n_experts - c.n_experts_used) - unread_embedding;
  return m;
}

// The multi-token-prediction layer where the file has one: what it is and what it keeps
// resident when it drafts (-d mtp).
std::string mtp_ffn_kind(const ModelConfig& c, const ModelWeights& w) {
  if (!w.layer(w.mtp_layer())[LayerVector::FfnNorm]) return "none";
  return c.moe() ? "experts" : "dense";
}

nlohmann::json mtp_json(const ModelConfig& c, const ModelWeights& w) {
  return {{"layers", c.mtp_layers},
          {"block", w.mtp_layer()},
          {"ffn", mtp_ffn_kind(c, w)},
          {"own_head", w.mtp_head.data != w.output.data},
          {"resident_bytes", w.mtp_bytes()}};
}

std::string mtp_line(const ModelConfig& c, const ModelWeights& w) {
  const std::string ffn = mtp_ffn_kind(c, w);
  return "  MTP layer (nextn, block " + std::to_string(w.mtp_layer()) + (c.mtp_layers > 1 ? ", the first of " + std::to_string(c.mtp_layers) : "") +
         "): gated attention" + (ffn == "none" ? "" : " + " + ffn + " FFN") + ", eh_proj; " +
         format_bytes(w.mtp_bytes()) + " resident with -d mtp, head " +
         (w.mtp_head.data != w.output.data ? "its own (output_extra)" : "the model's") +
         "; the forward never runs it\n";
}

// printf into `out`, a line at most 511 bytes long.
__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  out += buf;
}

// The file's tokenizer, which must have a token per row of the embedding.
Tokenizer checked_tokenizer(const GgufFile& f, const ModelConfig& c, const std::string& path) {
  Tokenizer tok = Tokenizer::from_gguf(f);
  if (tok.n_vocab() != c.n_vocab)
    throw Error(path + ": tokenizer has " + std::to_string(tok.n_vocab()) + " tokens but the embedding has " +
                std::to_string(c.n_vocab) + " rows");
  return tok;
}

// The plan generate would make (the engine's PlanRequest less its tree's rows).
MemoryPlan inspect_plan(const InspectArgs& a, const GgufFile& f, const ModelConfig& c, const ModelWeights& w) {
  const std::optional<GgmlType> self = self_draft_type(a.draft);
  const uint64_t self_bytes = self ? quantized_model_bytes(f, QuantizeOptions::self_draft(*self)) : 0;
  PlanRequest req;
  req.placement = a.placement;
  req.gpu = a.backend == "cuda";
  if (!req.gpu) req.memory_available = probe_host_memory().available();
  req.draft = draft_kind(a.draft);
  if (req.draft == DraftKind::Mtp && !w.has_mtp()) throw Error(no_mtp_layer(a.path));
  if (req.draft == DraftKind::Self) req.draft_bytes = self_bytes;
  if (req.draft == DraftKind::File && !req.gpu) req.draft_bytes = GgufFile::open(a.draft).file_size();
  req.context = a.ctx > 0 ? a.ctx : std::min(c.context_length, Engine::kDefaultSessionContext);
  req.key_type = a.kv_types.key_type();
  req.value_type = a.kv_types.value_type();
  // A draft file on the GPU: all of it in VRAM, which the plan sizes by its shapes.
  std::optional<GgufFile> df;
  std::optional<ModelConfig> dc;
  std::optional<ModelWeights> dw;
  if (req.gpu && req.draft == DraftKind::File) {
    df.emplace(GgufFile::open(a.draft));
    dc.emplace(ModelConfig::from_gguf(*df));
    dw.emplace(*df, *dc);
    req.draft_weights = &*dw;
    req.draft_config = &*dc;
  }
  return plan_memory(f, c, w, req);
}

// The ops the backend planned for runs through the host, known without making one (no
// GPU needed): none on the CPU, the CUDA backend's table of this build.
std::span<const HostFallbackOp> planned_host_fallbacks(const std::string& backend) {
  if (backend == "cuda") return cuda_host_fallback_ops();
  return {};
}

// Everything inspect reports of one file, worked out once for the text and the JSON.
struct Inspection {
  GgufFile f;
  ModelConfig c;
  ModelWeights w;
  Tokenizer tok;
  MemoryPlan plan;
  KvType k_type, v_type;
  int64_t ctx;
  // By kind of layer: windowed layers in a ring (with room for a step of 64 rows; a
  // draft's larger trees widen it), on every backend.
  KvFootprint kv;
  uint64_t kv_per_token;
  std::map<std::string, int64_t> bytes_by_type;
  int64_t total = 0;
  MoeSummary moe;
  // Hybrid models: the recurrent layers' state (f32, whatever --kv-type) and what a
  // draft tree's node records per recurrent layer (model/recurrent_state.h).
  int64_t recurrent_layers;
  uint64_t state_bytes, record_bytes;
  std::string kinds;  // one letter per layer: R recurrent, A attention
  std::span<const HostFallbackOp> host_fallbacks;

  explicit Inspection(const InspectArgs& a)
      : f(GgufFile::open(a.path)),
        c(ModelConfig::from_gguf(f)),
        w(f, c),
        tok(checked_tokenizer(f, c, a.path)),
        plan(inspect_plan(a, f, c, w)),
        k_type(a.kv_types.key_type()),
        v_type(a.kv_types.value_type()),
        ctx(a.ctx > 0 ? a.ctx : c.context_length),
        kv(kv_footprint(c, k_type, v_type, ctx, Model::kRingStepRows)),
        kv_per_token(kv.token_bytes()),
        moe(moe_summary(f, c, w)),
        recurrent_layers(c.n_layers - c.attention_layers()),
        state_bytes(uint64_t(recurrent_layers * RecurrentState::state_floats(c.delta)) * sizeof(float)),
        record_bytes(uint64_t(RecurrentState::record_floats(c.delta)) * sizeof(float)),
        host_fallbacks(planned_host_fallbacks(a.backend)) {
    for (const auto& t : f.tensors()) {
      bytes_by_type[std::string(type_name(t.type))] += int64_t(t.nbytes);
      total += int64_t(t.nbytes);
    }
    for (int64_t l = 0; l < c.n_layers; ++l) kinds += c.recurrent(l) ? 'R' : 'A';
  }
  Inspection(const Inspection&) = delete;
  Inspection& operator=(const Inspection&) = delete;
};

// --json: the file's description and the plan.
nlohmann::json inspect_json(const InspectArgs& a, const Inspection& s) {
  const ModelConfig& c = s.c;
  return {
      {"path", a.path},
      {"gguf_version", s.f.version()},
      {"architecture", c.arch},
      {"n_vocab", c.n_vocab},
      {"dim", c.dim},
      {"n_layers", c.n_layers},
      {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"ffn_dim", c.ffn_dim},
      {"n_rot", c.n_rot},
      {"context_length", c.context_length},
      {"rms_eps", c.rms_eps},
      {"rope_freq_base", c.rope_freq_base},
      {"rope_neox", c.rope_neox},
      {"rope_scaling", c.rope_scaling},
      {"rope_factors", s.w.rope_factors_offset() >= 0},
      {"tied_output", c.tied_output},
      {"tokenizer", s.tok.model()},
      {"pre_tokenizer", s.tok.pre()},
      {"n_tokens", s.tok.n_vocab()},
      {"bos", s.tok.bos()},
      {"eos", s.tok.eos()},
      {"add_bos", s.tok.add_bos()},
      {"end_of_generation", s.tok.end_of_generation()},
      {"tensors", s.f.tensors().size()},
      {"tensor_bytes", s.total},
      {"bytes_by_type", s.bytes_by_type},
      {"layer_bytes", s.plan.layer_bytes},
      {"kv_type", kv_types_label(s.k_type, s.v_type)},
      {"k_type", kv_type_name(s.k_type)},
      {"v_type", kv_type_name(s.v_type)},
      {"kv_bytes_per_token", s.kv_per_token},
      {"placement", s.plan.to_json()},
  };
}

// --json: the sections only some models (or backends) have.
void add_optional_json(nlohmann::json& j, const Inspection& s) {
  const ModelConfig& c = s.c;
  if (c.moe())
    j["moe"] = {{"experts", c.n_experts},
                {"experts_used", c.n_experts_used},
                {"expert_ffn_dim", c.expert_ffn_dim},
                {"params_total", s.moe.params_total},
                {"params_active", s.moe.params_active},
                {"token_layer_bytes", s.moe.dense_bytes + s.moe.expert_bytes},
                {"token_dense_bytes", s.moe.dense_bytes},
                {"token_expert_bytes", s.moe.expert_bytes}};
  if (c.per_layer_input_dim > 0)
    j["per_layer_embeddings"] = {{"width", s.w.ple_table.cols},
                                 {"type", std::string(type_name(s.w.ple_table.type))},
                                 {"table_bytes", s.plan.ple_table_bytes},
                                 {"bytes_per_token", s.plan.ple_row_bytes}};
  if (s.kv.windowed_layers > 0)
    j["kv_cache"] = {{"context", s.ctx},
                     {"global_layers", s.kv.global_layers},
                     {"windowed_layers", s.kv.windowed_layers},
                     {"window", c.sliding_window},
                     {"windowed_ring", s.kv.ring},
                     {"windowed_rows", s.kv.ring ? s.kv.ring_rows : s.ctx},
                     {"bytes_per_token_per_layer", s.kv.layer_token_bytes},
                     {"global_bytes", s.kv.global_bytes()},
                     {"windowed_bytes", s.kv.windowed_bytes()},
                     {"total_bytes", s.kv.total_bytes()}};
  if (s.w.has_mtp()) j["mtp"] = mtp_json(c, s.w);
  if (c.hybrid())
    j["hybrid"] = {{"layer_kinds", s.kinds},
                   {"recurrent_layers", s.recurrent_layers},
                   {"attention_layers", c.attention_layers()},
                   {"full_attention_interval", c.full_attention_interval},
                   {"ssm", {{"conv_kernel", c.delta.conv_kernel},
                            {"state", c.delta.state},
                            {"k_heads", c.delta.k_heads},
                            {"v_heads", c.delta.v_heads}}},
                   {"recurrent_state_bytes_per_sequence", s.state_bytes},
                   {"recurrent_state_bytes_held_per_sequence", RecurrentState::kHeldStates * s.state_bytes},
                   {"tree_node_bytes_per_recurrent_layer", s.record_bytes},
                   {"tree_node_bytes", s.record_bytes * uint64_t(s.recurrent_layers)},
                   {"kv_applies_to", "attention layers"}};
  if (!s.host_fallbacks.empty()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const HostFallbackOp& op : s.host_fallbacks) ops.push_back({{"op", op.name}, {"used_by", op.used_by}});
    j["host_fallback_ops"] = ops;
  }
}

// Text: the file, its shape, tokenizer, experts and tensor types.
std::string model_text(const InspectArgs& a, const Inspection& s) {
  const ModelConfig& c = s.c;
  const Tokenizer& tok = s.tok;
  std::string out;
  appendf(out, "%s: GGUF v%u, %zu tensors, %.2f MB of tensor data\n", a.path.c_str(), s.f.version(),
          s.f.tensors().size(), double(s.total) / 1e6);
  appendf(out, "  arch %s: vocab %lld, dim %lld, layers %lld, heads %lld/%lld (head dim %lld), ffn %lld\n",
          c.arch.c_str(), (long long)c.n_vocab, (long long)c.dim, (long long)c.n_layers, (long long)c.n_heads,
          (long long)c.n_kv_heads, (long long)c.head_dim, (long long)c.ffn_dim);
  appendf(out, "  rope %s dims %lld base %g%s%s, rms eps %g, context %lld, output head %s\n",
          c.rope_neox ? "neox" : "normal", (long long)c.n_rot, double(c.rope_freq_base),
          s.w.rope_factors_offset() >= 0 ? ", frequency factors (rope_freqs)" : "",
          c.rope_freq_scale != 1.0f ? (", linear scale " + std::to_string(c.rope_freq_scale)).c_str() : "",
          double(c.rms_eps), (long long)c.context_length, c.tied_output ? "tied" : "separate");
  std::string eog;
  for (int32_t id : tok.end_of_generation()) eog += (eog.empty() ? "" : " ") + std::to_string(id);
  appendf(out, "  tokenizer %s%s%s: %d tokens, bos %d%s, eos %d, end of generation {%s}\n", tok.model().c_str(),
          tok.pre().empty() ? "" : "/", tok.pre().c_str(), tok.n_vocab(), tok.bos(), tok.add_bos() ? " (added)" : "",
          tok.eos(), eog.c_str());
  if (c.moe())
    appendf(out,
            "  mixture of experts: %lld experts of width %lld, %lld per token; %.3g B parameters, %.3g B active "
            "per token; a token reads %s of layer weights (dense parts %s + %lld experts per layer %s)\n",
            (long long)c.n_experts, (long long)c.expert_ffn_dim, (long long)c.n_experts_used,
            double(s.moe.params_total) / 1e9, double(s.moe.params_active) / 1e9,
            format_bytes(s.moe.dense_bytes + s.moe.expert_bytes).c_str(), format_bytes(s.moe.dense_bytes).c_str(),
            (long long)c.n_experts_used, format_bytes(s.moe.expert_bytes).c_str());
  for (const auto& [k, v] : s.bytes_by_type) appendf(out, "  %-6s %14lld bytes\n", k.c_str(), (long long)v);
  return out;
}

// Text: what a sequence keeps (a hybrid's recurrent state, the MTP layer, the KV cache).
std::string state_text(const Inspection& s) {
  const ModelConfig& c = s.c;
  std::string out;
  if (c.hybrid()) {
    appendf(out,
            "  hybrid: %lld Gated DeltaNet layers (conv %lld, %lld key / %lld value heads of %lld) and %lld gated "
            "attention layers (every %lld): %s\n",
            (long long)s.recurrent_layers, (long long)c.delta.conv_kernel, (long long)c.delta.k_heads,
            (long long)c.delta.v_heads, (long long)c.delta.state, (long long)c.attention_layers(),
            (long long)c.full_attention_interval, s.kinds.c_str());
    appendf(out,
            "  recurrent state (f32, not --kv-type): %s per sequence at any context, %s held (committed, the "
            "one before the last commit, a prompt's end); a draft tree node records %s per recurrent layer, "
            "%s in all\n",
            format_bytes(s.state_bytes).c_str(), format_bytes(RecurrentState::kHeldStates * s.state_bytes).c_str(),
            format_bytes(s.record_bytes).c_str(), format_bytes(s.record_bytes * uint64_t(s.recurrent_layers)).c_str());
  }
  if (s.w.has_mtp()) out += mtp_line(c, s.w);
  appendf(out, "  KV cache (K %s, V %s%s): %s per token, %s for %lld tokens\n", kv_type_name(s.k_type),
          kv_type_name(s.v_type),
          c.hybrid() ? (", attention layers only: " + std::to_string(c.attention_layers()) + " of " +
                        std::to_string(c.n_layers)).c_str()
                     : "",
          format_bytes(s.kv_per_token).c_str(), format_bytes(s.kv_per_token * uint64_t(s.ctx)).c_str(),
          (long long)s.ctx);
  if (s.kv.windowed_layers > 0)
    appendf(out,
            "  KV by kind of layer at %lld tokens: %lld global layers x %lld positions = %s; %lld windowed "
            "layers (window %lld) x %lld positions%s = %s; %s in all\n",
            (long long)s.ctx, (long long)s.kv.global_layers, (long long)s.ctx, format_bytes(s.kv.global_bytes()).c_str(),
            (long long)s.kv.windowed_layers, (long long)c.sliding_window,
            (long long)(s.kv.ring ? s.kv.ring_rows : s.ctx), s.kv.ring ? " (a ring: the window and 64 rows)" : "",
            format_bytes(s.kv.windowed_bytes()).c_str(), format_bytes(s.kv.total_bytes()).c_str());
  if (c.per_layer_input_dim > 0)
    appendf(out,
            "  per-layer embeddings: %lld layers x %lld values per token (%s), a table of %s left in the file, "
            "%s read per token (from storage when streamed, never resident)\n",
            (long long)c.n_layers, (long long)c.per_layer_input_dim, std::string(type_name(s.w.ple_table.type)).c_str(),
            format_bytes(s.plan.ple_table_bytes).c_str(), format_bytes(s.plan.ple_row_bytes).c_str());
  return out;
}

// Text: the plan, each streamed layer, and the ops the backend runs through the host.
std::string placement_text(const InspectArgs& a, const Inspection& s) {
  const MemoryPlan& plan = s.plan;
  std::string out = "  placement (" + a.backend + (a.placement.stream ? ", --stream" : "") + "): " + plan.describe() + "\n";
  if (plan.stream) {
    for (size_t l = 0; l < plan.stream->layers.size(); ++l) {
      const LayerExtent& e = plan.stream->layers[l];
      const int64_t layer = plan.n_vram + int64_t(l);
      appendf(out, "  layer %3lld%s: %12llu bytes, reads %12llu in %zu range%s, %s\n", (long long)layer,
              !s.c.hybrid() ? "" : s.c.recurrent(layer) ? " (recurrent)" : " (attention)",
              (unsigned long long)e.tensor_bytes, (unsigned long long)e.read_bytes, e.ranges.size(),
              e.ranges.size() == 1 ? "" : "s", e.resident ? "resident" : "streamed");
    }
  }
  if (!s.host_fallbacks.empty())
    out += "  host fallbacks (" + a.backend + "): " + std::to_string(s.host_fallbacks.size()) +
           " ops have no kernel of the backend's own and run through the host (download, compute, upload): " +
           describe_host_fallbacks(s.host_fallbacks) + "\n";
  return out;
}

int run_inspect(const InspectArgs& a) {
  const Inspection s(a);
  if (a.json) {
    nlohmann::json j = inspect_json(a, s);
    add_optional_json(j, s);
    print_stdout(j.dump() + "\n");
    return 0;
  }
  print_stdout(model_text(a, s) + state_text(s) + placement_text(a, s));
  return 0;
}

}  // namespace

Action register_inspect(CLI::App& app) {
  auto [sub, args] = add_command<InspectArgs>(app, "inspect", "show a GGUF model's metadata and where the engine would place it");
  // One model: a second one (a positional path and -m) is refused, not silently preferred.
  sub->add_option("model,-m,--model", args->path, "GGUF file")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  sub->add_flag("--json", args->json, "print JSON");
  sub->add_option("--backend", args->backend, "backend to plan for")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  add_placement_flags(*sub, args->placement);
  add_kv_type_options(*sub, args->kv_types);
  sub->add_option("-d,--draft", args->draft, "the draft the plan makes room for: a GGUF file, self:TYPE (the model quantized at load) or mtp (its MTP layer)");
  sub->add_option("-c,--ctx,--ctx-size", args->ctx, "context to size the KV cache for (default: the trained length)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  CLI::Option* routing =
      sub->add_option("--routing", args->routing.prompts,
                      "PROMPTS: routing statistics of a mixture-of-experts model over these prompts and their greedy "
                      "continuations, run resident on the CPU (one prompt per line, or bench's JSON lines)");
  sub->add_option("-n,--n-predict", args->routing.n_predict, "with --routing: greedy tokens generated after each prompt")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
      ->needs(routing)
      ->capture_default_str();
  sub->add_option("-t,--threads", args->routing.threads, "with --routing: CPU threads (default: all cores)")
      ->check(CLI::Range(1, 1024))
      ->needs(routing);
  return [args, routing] {
    check_placement_flags(args->placement, args->backend);
    if (routing->count() == 0) return run_inspect(*args);
    if (args->backend != "cpu" || args->placement.stream || !args->draft.empty())
      throw UsageError("--routing runs the model alone, resident on the CPU: without --backend cuda, --stream or -d");
    args->routing.model = args->path;
    args->routing.json = args->json;
    return run_inspect_routing(args->routing);
  };
}

}  // namespace flashspec
