// `flashspec inspect`: what a GGUF file holds and where the engine would put every layer
// under the given placement flags (the same plan `generate` runs), plus the KV cache's
// bytes per token.
#include <cstdio>
#include <limits>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/inspect_routing.h"
#include "apps/output.h"
#include "apps/run_options.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/host_memory.h"
#include "core/llama_config.h"
#include "core/tokenizer.h"
#include "engine/engine.h"
#include "target/placement.h"
#include "engine/quantize.h"
#include "model/kv_footprint.h"
#include "model/llama_model.h"
#include "model/model_weights.h"
#include "model/recurrent_state.h"

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

MoeSummary moe_summary(const GgufFile& f, const LlamaConfig& c, const ModelWeights& w) {
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
std::string mtp_ffn_kind(const LlamaConfig& c, const ModelWeights& w) {
  if (!w.layer(w.mtp_layer())[LayerVector::FfnNorm]) return "none";
  return c.moe() ? "experts" : "dense";
}

nlohmann::json mtp_json(const LlamaConfig& c, const ModelWeights& w) {
  return {{"layers", c.mtp_layers},
          {"block", w.mtp_layer()},
          {"ffn", mtp_ffn_kind(c, w)},
          {"own_head", w.mtp_head.data != w.output.data},
          {"resident_bytes", w.mtp_bytes()}};
}

std::string mtp_line(const LlamaConfig& c, const ModelWeights& w) {
  const std::string ffn = mtp_ffn_kind(c, w);
  return "  MTP layer (nextn, block " + std::to_string(w.mtp_layer()) + (c.mtp_layers > 1 ? ", the first of " + std::to_string(c.mtp_layers) : "") +
         "): gated attention" + (ffn == "none" ? "" : " + " + ffn + " FFN") + ", eh_proj; " +
         format_bytes(w.mtp_bytes()) + " resident with -d mtp, head " +
         (w.mtp_head.data != w.output.data ? "its own (output_extra)" : "the model's") +
         "; the forward never runs it\n";
}

int run_inspect(const InspectArgs& a) {
  const GgufFile f = GgufFile::open(a.path);
  const LlamaConfig c = LlamaConfig::from_gguf(f);
  const ModelWeights w(f, c);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  if (tok.n_vocab() != c.n_vocab)
    throw Error(a.path + ": tokenizer has " + std::to_string(tok.n_vocab()) + " tokens but the embedding has " +
                std::to_string(c.n_vocab) + " rows");
  const std::optional<GgmlType> self = self_draft_type(a.draft);
  const uint64_t self_bytes = self ? quantized_model_bytes(f, QuantizeOptions::self_draft(*self)) : 0;
  PlacementOptions placement = a.placement;
  placement.mtp = a.draft == kMtpDraft;
  if (placement.mtp && !w.has_mtp()) throw Error(no_mtp_layer(a.path));
  const PlacementPlan plan = plan_placement(f, w, placement, a.backend == "cuda", self_bytes,
                                            a.backend == "cuda" ? std::numeric_limits<uint64_t>::max()
                                                                : probe_host_memory().available());
  const KvType k_type = a.kv_types.key_type(), v_type = a.kv_types.value_type();
  const uint64_t kv_per_token = uint64_t(c.attention_layers()) * (kv_bytes(k_type, c.kv_dim()) + kv_bytes(v_type, c.kv_dim()));
  const int64_t ctx = a.ctx > 0 ? a.ctx : c.context_length;
  // By kind of layer: windowed layers in a ring (with room for a step of 64 rows; a
  // draft's larger trees widen it), on every backend.
  const KvFootprint kv = kv_footprint(c, k_type, v_type, ctx, LlamaModel::kRingStepRows);
  std::map<std::string, int64_t> bytes_by_type;
  int64_t total = 0;
  for (const auto& t : f.tensors()) {
    bytes_by_type[std::string(type_name(t.type))] += int64_t(t.nbytes);
    total += int64_t(t.nbytes);
  }
  const MoeSummary moe = moe_summary(f, c, w);
  // Hybrid models: the recurrent layers' state (f32, whatever --kv-type) and what a
  // draft tree's node records per recurrent layer (model/recurrent_state.h).
  const int64_t recurrent_layers = c.n_layers - c.attention_layers();
  const uint64_t state_bytes = uint64_t(recurrent_layers * RecurrentState::state_floats(c.delta)) * sizeof(float);
  const uint64_t record_bytes = uint64_t(RecurrentState::record_floats(c.delta)) * sizeof(float);
  std::string kinds;  // one letter per layer: R recurrent, A attention
  for (int64_t l = 0; l < c.n_layers; ++l) kinds += c.recurrent(l) ? 'R' : 'A';
  if (a.json) {
    nlohmann::json j = {
        {"path", a.path},
        {"gguf_version", f.version()},
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
        {"rope_factors", w.rope_factors_offset() >= 0},
        {"tied_output", c.tied_output},
        {"tokenizer", tok.model()},
        {"pre_tokenizer", tok.pre()},
        {"n_tokens", tok.n_vocab()},
        {"bos", tok.bos()},
        {"eos", tok.eos()},
        {"add_bos", tok.add_bos()},
        {"end_of_generation", tok.end_of_generation()},
        {"tensors", f.tensors().size()},
        {"tensor_bytes", total},
        {"bytes_by_type", bytes_by_type},
        {"layer_bytes", plan.layer_bytes},
        {"kv_type", kv_types_label(k_type, v_type)},
        {"k_type", kv_type_name(k_type)},
        {"v_type", kv_type_name(v_type)},
        {"kv_bytes_per_token", kv_per_token},
        {"placement", plan.to_json()},
    };
    if (c.moe())
      j["moe"] = {{"experts", c.n_experts},
                  {"experts_used", c.n_experts_used},
                  {"expert_ffn_dim", c.expert_ffn_dim},
                  {"params_total", moe.params_total},
                  {"params_active", moe.params_active},
                  {"token_layer_bytes", moe.dense_bytes + moe.expert_bytes},
                  {"token_dense_bytes", moe.dense_bytes},
                  {"token_expert_bytes", moe.expert_bytes}};
    if (kv.windowed_layers > 0)
      j["kv_cache"] = {{"context", ctx},
                       {"global_layers", kv.global_layers},
                       {"windowed_layers", kv.windowed_layers},
                       {"window", c.sliding_window},
                       {"windowed_ring", kv.ring},
                       {"windowed_rows", kv.ring ? kv.ring_rows : ctx},
                       {"bytes_per_token_per_layer", kv.layer_token_bytes},
                       {"global_bytes", kv.global_bytes()},
                       {"windowed_bytes", kv.windowed_bytes()},
                       {"total_bytes", kv.total_bytes()}};
    if (w.has_mtp()) j["mtp"] = mtp_json(c, w);
    if (c.hybrid())
      j["hybrid"] = {{"layer_kinds", kinds},
                     {"recurrent_layers", recurrent_layers},
                     {"attention_layers", c.attention_layers()},
                     {"full_attention_interval", c.full_attention_interval},
                     {"ssm", {{"conv_kernel", c.delta.conv_kernel},
                              {"state", c.delta.state},
                              {"k_heads", c.delta.k_heads},
                              {"v_heads", c.delta.v_heads}}},
                     {"recurrent_state_bytes_per_sequence", state_bytes},
                     {"recurrent_state_bytes_held_per_sequence", RecurrentState::kHeldStates * state_bytes},
                     {"tree_node_bytes_per_recurrent_layer", record_bytes},
                     {"tree_node_bytes", record_bytes * uint64_t(recurrent_layers)},
                     {"kv_applies_to", "attention layers"}};
    print_stdout(j.dump() + "\n");
    return 0;
  }
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s: GGUF v%u, %zu tensors, %.2f MB of tensor data\n", a.path.c_str(), f.version(),
                f.tensors().size(), double(total) / 1e6);
  out += buf;
  std::snprintf(buf, sizeof buf, "  arch %s: vocab %lld, dim %lld, layers %lld, heads %lld/%lld (head dim %lld), ffn %lld\n",
                c.arch.c_str(), (long long)c.n_vocab, (long long)c.dim, (long long)c.n_layers, (long long)c.n_heads,
                (long long)c.n_kv_heads, (long long)c.head_dim, (long long)c.ffn_dim);
  out += buf;
  std::snprintf(buf, sizeof buf, "  rope %s dims %lld base %g%s%s, rms eps %g, context %lld, output head %s\n",
                c.rope_neox ? "neox" : "normal", (long long)c.n_rot, double(c.rope_freq_base),
                w.rope_factors_offset() >= 0 ? ", frequency factors (rope_freqs)" : "",
                c.rope_freq_scale != 1.0f ? (", linear scale " + std::to_string(c.rope_freq_scale)).c_str() : "",
                double(c.rms_eps), (long long)c.context_length, c.tied_output ? "tied" : "separate");
  out += buf;
  std::string eog;
  for (int32_t id : tok.end_of_generation()) eog += (eog.empty() ? "" : " ") + std::to_string(id);
  std::snprintf(buf, sizeof buf, "  tokenizer %s%s%s: %d tokens, bos %d%s, eos %d, end of generation {%s}\n",
                tok.model().c_str(), tok.pre().empty() ? "" : "/", tok.pre().c_str(), tok.n_vocab(), tok.bos(),
                tok.add_bos() ? " (added)" : "", tok.eos(), eog.c_str());
  out += buf;
  if (c.moe()) {
    std::snprintf(buf, sizeof buf,
                  "  mixture of experts: %lld experts of width %lld, %lld per token; %.3g B parameters, %.3g B active "
                  "per token; a token reads %s of layer weights (dense parts %s + %lld experts per layer %s)\n",
                  (long long)c.n_experts, (long long)c.expert_ffn_dim, (long long)c.n_experts_used,
                  double(moe.params_total) / 1e9, double(moe.params_active) / 1e9,
                  format_bytes(moe.dense_bytes + moe.expert_bytes).c_str(), format_bytes(moe.dense_bytes).c_str(),
                  (long long)c.n_experts_used, format_bytes(moe.expert_bytes).c_str());
    out += buf;
  }
  for (const auto& [k, v] : bytes_by_type) {
    std::snprintf(buf, sizeof buf, "  %-6s %14lld bytes\n", k.c_str(), (long long)v);
    out += buf;
  }
  if (c.hybrid()) {
    std::snprintf(buf, sizeof buf,
                  "  hybrid: %lld Gated DeltaNet layers (conv %lld, %lld key / %lld value heads of %lld) and %lld gated "
                  "attention layers (every %lld): %s\n",
                  (long long)recurrent_layers, (long long)c.delta.conv_kernel, (long long)c.delta.k_heads,
                  (long long)c.delta.v_heads, (long long)c.delta.state, (long long)c.attention_layers(),
                  (long long)c.full_attention_interval, kinds.c_str());
    out += buf;
    std::snprintf(buf, sizeof buf,
                  "  recurrent state (f32, not --kv-type): %s per sequence at any context, %s held (committed, the "
                  "one before the last commit, a prompt's end); a draft tree node records %s per recurrent layer, "
                  "%s in all\n",
                  format_bytes(state_bytes).c_str(), format_bytes(RecurrentState::kHeldStates * state_bytes).c_str(),
                  format_bytes(record_bytes).c_str(), format_bytes(record_bytes * uint64_t(recurrent_layers)).c_str());
    out += buf;
  }
  if (w.has_mtp()) out += mtp_line(c, w);
  std::snprintf(buf, sizeof buf, "  KV cache (K %s, V %s%s): %s per token, %s for %lld tokens\n",
                kv_type_name(k_type), kv_type_name(v_type),
                c.hybrid() ? (", attention layers only: " + std::to_string(c.attention_layers()) + " of " +
                              std::to_string(c.n_layers)).c_str()
                           : "",
                format_bytes(kv_per_token).c_str(), format_bytes(kv_per_token * uint64_t(ctx)).c_str(), (long long)ctx);
  out += buf;
  if (kv.windowed_layers > 0) {
    std::snprintf(buf, sizeof buf,
                  "  KV by kind of layer at %lld tokens: %lld global layers x %lld positions = %s; %lld windowed "
                  "layers (window %lld) x %lld positions%s = %s; %s in all\n",
                  (long long)ctx, (long long)kv.global_layers, (long long)ctx, format_bytes(kv.global_bytes()).c_str(),
                  (long long)kv.windowed_layers, (long long)c.sliding_window, (long long)(kv.ring ? kv.ring_rows : ctx),
                  kv.ring ? " (a ring: the window and 64 rows)" : "", format_bytes(kv.windowed_bytes()).c_str(),
                  format_bytes(kv.total_bytes()).c_str());
    out += buf;
  }
  out += "  placement (" + a.backend + (a.placement.stream ? ", --stream" : "") + "): " + plan.describe() + "\n";
  if (plan.stream) {
    for (size_t l = 0; l < plan.stream->layers.size(); ++l) {
      const LayerExtent& e = plan.stream->layers[l];
      const int64_t layer = plan.n_vram + int64_t(l);
      std::snprintf(buf, sizeof buf, "  layer %3lld%s: %12llu bytes, reads %12llu in %zu range%s, %s\n",
                    (long long)layer, !c.hybrid() ? "" : c.recurrent(layer) ? " (recurrent)" : " (attention)",
                    (unsigned long long)e.tensor_bytes, (unsigned long long)e.read_bytes, e.ranges.size(),
                    e.ranges.size() == 1 ? "" : "s", e.resident ? "resident" : "streamed");
      out += buf;
    }
  }
  print_stdout(out);
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
  sub->add_option("-d,--draft", args->draft, "self:TYPE: show the self-draft (the model quantized at load) in the plan; mtp: the MTP layer resident");
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
