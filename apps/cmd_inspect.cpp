// `flashspec inspect`: what a GGUF file holds and how the engine would run it.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "apps/commands.h"
#include "apps/json_writer.h"
#include "core/gguf.h"
#include "core/llama_config.h"
#include "core/error.h"
#include "core/tokenizer.h"
#include "core/units.h"
#include "offload/stream_source.h"
#include "target/model_weights.h"
#include "target/staged_layers.h"

namespace flashspec {

namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
  std::string ram_budget = "0";  // streaming plan for this budget
  std::string vram_budget;       // and in front of it, the VRAM tier of --backend cuda
};

uint64_t size_arg(const std::string& flag, const std::string& v) {
  const std::optional<double> b = parse_size(v);
  if (!b || *b > 1e18) throw Error(flag + ": '" + v + "' is not a size (e.g. 512M, 2G)");
  return uint64_t(*b);
}

// ---- VRAM tier (target/staged_layers.h): the leading layers that fit --vram-budget ----
struct VramPlan {
  uint64_t budget = 0, resident_bytes = 0, slot_bytes = 0;
  int64_t n_resident = 0, n_layers = 0;
};

VramPlan vram_plan(const InspectArgs& a, const ModelWeights& w) {
  VramPlan p;
  p.n_layers = int64_t(w.layer_tensors().size());
  if (a.vram_budget.empty()) {
    p.n_resident = 0;
    return p;
  }
  p.budget = size_arg("--vram-budget", a.vram_budget);
  p.n_resident = StagedLayers::resident_layers_for(w, p.budget);
  for (int64_t l = 0; l < p.n_layers; ++l) {
    const uint64_t b = StagedLayers::packed_bytes(w, l);
    if (l < p.n_resident) p.resident_bytes += b;
    else p.slot_bytes = std::max(p.slot_bytes, b);
  }
  return p;
}

void json_vram_plan(JsonWriter& j, const VramPlan& p, uint64_t fixed) {
  j.key("vram_plan").begin_object();
  j.field("vram_budget", int64_t(p.budget)).field("n_resident", p.n_resident);
  j.field("resident_bytes", int64_t(p.resident_bytes)).field("ring_slots", int64_t(p.n_resident < p.n_layers ? 2 : 0));
  j.field("slot_bytes", int64_t(p.slot_bytes)).field("fixed_bytes", int64_t(fixed));
  j.end_object();
}

void print_vram_plan(const VramPlan& p, uint64_t fixed) {
  std::printf("  VRAM plan for --vram-budget %s: %lld of %lld layers resident (%s)", format_bytes(p.budget).c_str(),
              (long long)p.n_resident, (long long)p.n_layers, format_bytes(p.resident_bytes).c_str());
  if (p.n_resident < p.n_layers)
    std::printf(", the rest through 2 slots of %s", format_bytes(p.slot_bytes).c_str());
  std::printf("; besides, %s (embedding, output head, norms) and the KV cache\n", format_bytes(fixed).c_str());
}
// ---- end of VRAM tier ----

// ---- streaming plan (offload/): which layers stay resident under --ram-budget ----
// Layers `first`.. are streamed (those before it are in VRAM).
LayerPlan stream_plan(const InspectArgs& a, const ModelWeights& w, int64_t first) {
  PlanOptions po;
  po.ram_budget = size_arg("--ram-budget", a.ram_budget);
  std::vector<std::vector<TensorExtent>> extents = layer_extents(w);
  extents.erase(extents.begin(), extents.begin() + first);
  return plan_layers(extents, po);
}

void json_stream_plan(JsonWriter& j, const LayerPlan& p, uint64_t fixed, int64_t first) {
  j.key("stream_plan").begin_object();
  j.field("first_layer", first);
  j.field("ram_budget", int64_t(p.ram_budget)).field("n_resident", int64_t(p.n_resident));
  j.field("resident_bytes", int64_t(p.resident_bytes)).field("streamed_bytes_per_pass", int64_t(p.streamed_bytes));
  j.field("ring_slots", int64_t(p.ring_slots)).field("slot_bytes", int64_t(p.slot_bytes));
  j.field("ring_bytes", int64_t(p.ring_bytes)).field("ring_over_budget", p.ring_over_budget());
  j.field("fixed_bytes", int64_t(fixed));  // embedding, output head, norms: always resident
  j.key("layers").begin_array();
  for (const LayerExtent& e : p.layers) {
    j.begin_object();
    j.field("tensor_bytes", int64_t(e.tensor_bytes)).field("read_bytes", int64_t(e.read_bytes));
    j.field("ranges", int64_t(e.ranges.size())).field("resident", e.resident);
    j.end_object();
  }
  j.end_array();
  j.end_object();
}

void print_stream_plan(const LayerPlan& p, uint64_t fixed, int64_t first) {
  std::printf("  stream plan for --ram-budget %s: %d of %zu %slayers resident (%s), %s streamed per pass\n",
              format_bytes(p.ram_budget).c_str(), p.n_resident, p.layers.size(), first > 0 ? "streamed " : "",
              format_bytes(p.resident_bytes).c_str(), format_bytes(p.streamed_bytes).c_str());
  if (p.ring_slots > 0)
    std::printf("  ring %d x %s = %s%s\n", p.ring_slots, format_bytes(p.slot_bytes).c_str(),
                format_bytes(p.ring_bytes).c_str(),
                p.ring_over_budget() ? " (the minimum ring: a fixed overhead over the budget)" : "");
  std::printf("  fixed: %s (embedding, output head, norms) stay resident in the mapping\n",
              format_bytes(fixed).c_str());
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerExtent& e = p.layers[l];
    std::printf("  layer %3lld: %12llu bytes, reads %12llu in %zu range%s, %s\n", (long long)(first + int64_t(l)),
                (unsigned long long)e.tensor_bytes, (unsigned long long)e.read_bytes, e.ranges.size(),
                e.ranges.size() == 1 ? "" : "s", e.resident ? "resident" : "streamed");
  }
}
// ---- end of streaming plan ----

int run_inspect(const InspectArgs& a) {
  const GgufFile f = GgufFile::open(a.path);
  const LlamaConfig c = LlamaConfig::from_gguf(f);
  const ModelWeights w(f, c);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const VramPlan vram = vram_plan(a, w);
  const uint64_t fixed = fixed_tensor_bytes(f, w);
  // Every layer in VRAM leaves nothing to stream (and no plan to show).
  const bool streams = vram.n_resident < vram.n_layers;
  const LayerPlan plan = streams ? stream_plan(a, w, vram.n_resident) : LayerPlan{};
  std::map<std::string, int64_t> bytes_by_type;
  int64_t total = 0;
  for (const auto& t : f.tensors()) {
    bytes_by_type[std::string(type_name(t.type))] += int64_t(t.nbytes);
    total += int64_t(t.nbytes);
  }
  std::vector<int64_t> layer_bytes;
  for (const auto& lt : w.layer_tensors()) {
    int64_t n = 0;
    for (auto* t : {lt.wq, lt.wk, lt.wv, lt.wo, lt.w_gate, lt.w_up, lt.w_down}) n += int64_t(t->nbytes);
    layer_bytes.push_back(n);
  }
  if (a.json) {
    JsonWriter j;
    j.begin_object();
    j.field("path", a.path).field("gguf_version", int64_t(f.version()));
    j.field("architecture", c.arch).field("n_vocab", c.n_vocab).field("dim", c.dim);
    j.field("n_layers", c.n_layers).field("n_heads", c.n_heads).field("n_kv_heads", c.n_kv_heads);
    j.field("head_dim", c.head_dim).field("ffn_dim", c.ffn_dim).field("n_rot", c.n_rot);
    j.field("context_length", c.context_length).field("rms_eps", double(c.rms_eps));
    j.field("rope_freq_base", double(c.rope_freq_base)).field("rope_neox", c.rope_neox);
    j.field("rope_scaling", c.rope_scaling).field("rope_factors", w.rope_factors_offset() >= 0);
    j.field("tied_output", c.tied_output);
    j.field("tokenizer", tok.model()).field("pre_tokenizer", tok.pre()).field("n_tokens", int64_t(tok.n_vocab()));
    j.field("bos", tok.bos()).field("eos", tok.eos()).field("add_bos", tok.add_bos());
    j.field("end_of_generation", tok.end_of_generation());
    j.field("tensors", int64_t(f.tensors().size())).field("tensor_bytes", total);
    j.key("bytes_by_type").begin_object();
    for (const auto& [k, v] : bytes_by_type) j.field(k, v);
    j.end_object();
    j.field("layer_bytes", layer_bytes);
    if (!a.vram_budget.empty()) json_vram_plan(j, vram, fixed);
    if (streams) json_stream_plan(j, plan, fixed, vram.n_resident);
    j.end_object();
    std::printf("%s\n", j.str().c_str());
    return 0;
  }
  std::printf("%s: GGUF v%u, %zu tensors, %.2f MB of tensor data\n", a.path.c_str(), f.version(),
              f.tensors().size(), double(total) / 1e6);
  std::printf("  arch %s: vocab %lld, dim %lld, layers %lld, heads %lld/%lld (head dim %lld), ffn %lld\n",
              c.arch.c_str(), (long long)c.n_vocab, (long long)c.dim, (long long)c.n_layers,
              (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.head_dim, (long long)c.ffn_dim);
  std::printf("  rope %s dims %lld base %g%s%s, rms eps %g, context %lld, output head %s\n",
              c.rope_neox ? "neox" : "normal", (long long)c.n_rot, double(c.rope_freq_base),
              w.rope_factors_offset() >= 0 ? ", frequency factors (rope_freqs)" : "",
              c.rope_freq_scale != 1.0f ? (", linear scale " + std::to_string(c.rope_freq_scale)).c_str() : "",
              double(c.rms_eps), (long long)c.context_length, c.tied_output ? "tied" : "separate");
  std::string eog;
  for (int32_t id : tok.end_of_generation()) eog += (eog.empty() ? "" : " ") + std::to_string(id);
  std::printf("  tokenizer %s%s%s: %d tokens, bos %d%s, eos %d, end of generation {%s}\n", tok.model().c_str(),
              tok.pre().empty() ? "" : "/", tok.pre().c_str(), tok.n_vocab(), tok.bos(),
              tok.add_bos() ? " (added)" : "", tok.eos(), eog.c_str());
  for (const auto& [k, v] : bytes_by_type) std::printf("  %-5s %12lld bytes\n", k.c_str(), (long long)v);
  if (!a.vram_budget.empty()) print_vram_plan(vram, fixed);
  if (streams) print_stream_plan(plan, fixed, vram.n_resident);
  return 0;
}

}  // namespace

Action register_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "show a GGUF model's metadata and layout");
  sub->add_option("model", args->path, "GGUF file")->required();
  sub->add_flag("--json", args->json, "print JSON");
  sub->add_option("--ram-budget", args->ram_budget, "show the streaming plan for this RAM budget (e.g. 2G)");
  sub->add_option("--vram-budget", args->vram_budget,
                  "show which layers --backend cuda keeps in this much VRAM (then stream the rest)");
  return [args] { return run_inspect(*args); };
}

}  // namespace flashspec
