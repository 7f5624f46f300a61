// `flashspec-make-fixtures --inflate` (tests/fixture_inflate.h): a Qwen3.5-layout model
// widened to wider shapes computes what the source computes. tiny-qwen35 and
// tiny-qwen35moe are widened to the test shapes (dim 256, heads 8 / 2 of 64, RoPE 32,
// state 32, 4 / 8 DeltaNet heads, wider FFNs and experts) in F32, and each model then
// decodes the same prompts: the greedy tokens are the source's, the logits within a
// tolerance at every position, and (MoE) every source layer's widened copy routes every
// token to the experts the source layer routes it to. The MoE file has 40 layers, so that
// its source layers sit 5 apart (layer i at 5 i + 4) between identity layers. Then Q8_0
// sources widened to Q8_0 (every block's values kept), the trained fixtures when they
// exist, an MTP layer widened beside the others, and one refusal line for each source the
// shape cannot take exactly. Then the dense llama widening (tests/fixture_inflate_llama.h):
// stories260K and salty279K widened to llama-wide-test decode as their sources in F32, the
// file's bytes do not depend on the thread count, Q8_0 generates, and its refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "model/model.h"
#include "tests/cli_runner.h"
#include "tests/fixture_inflate_llama.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// The generator, as scripts/make-fixtures.sh runs it.
CliResult inflate(const std::string& src, const std::string& shape, const std::string& type, const std::string& out,
                  std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--inflate", src, "--shape", shape, "--type", type};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(out);
  CliOptions o;
  o.program = FS_MAKE_FIXTURES_BIN;
  return run_cli(args, o);
}

// Every MoE layer's routed experts, all rows of all passes in order, each row's in id order
// (what a pass reads; two experts of near-equal probability may swap ranks).
struct RoutingLog : RoutingObserver {
  std::map<int64_t, std::vector<int32_t>> experts;
  int64_t k = 0;  // experts per row
  void guessed(int64_t, const Routing&) override {}
  void routed(int64_t layer, const Routing& r) override {
    k = r.k;
    auto& v = experts[layer];
    for (int64_t t = 0; t < r.rows; ++t) {
      const auto row = r.expert.begin() + long(t * r.k);
      v.insert(v.end(), row, row + long(r.k));
      std::sort(v.end() - long(r.k), v.end());
    }
  }
};

// What one model does with the prompts: its greedy tokens, the logits of every prompt
// position and generated step, and its routing.
struct Trace {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;  // one row per position, prompts one after another
  std::vector<size_t> first_step;          // per prompt: the row of logits its first greedy token came from
  RoutingLog routing;
};

const std::vector<std::string> kPrompts = {"Once upon a time", "The quick brown fox jumps over the lazy dog.",
                                           "def fibonacci(n):"};
constexpr int64_t kSteps = 24;

// `forced`: feed these tokens (per prompt) instead of the model's own greedy choices, so
// that two models' logits stay comparable after their choices part.
Trace decode(const std::string& path, const std::vector<std::vector<int32_t>>* forced = nullptr) {
  CpuBackend backend(2);
  Model model(path, backend);
  model.set_kv_types(KvType::F32, KvType::F32);
  Trace t;
  model.set_routing_observer(&t.routing);
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const size_t n_vocab = size_t(model.config().n_vocab);
  for (size_t pi = 0; pi < kPrompts.size(); ++pi) {
    const std::vector<int32_t> ids = tok.encode(kPrompts[pi], true);
    SequenceCache cache = model.make_cache(int64_t(ids.size()) + kSteps);
    std::vector<float> logits;
    model.forward_causal(ids, cache, LogitRows::All, logits);
    for (size_t p = 0; p < ids.size(); ++p)
      t.logits.emplace_back(logits.begin() + long(p * n_vocab), logits.begin() + long((p + 1) * n_vocab));
    std::vector<int32_t> out;
    t.first_step.push_back(t.logits.size() - 1);
    for (int64_t s = 0; s < kSteps; ++s) {
      const std::vector<float>& last = t.logits.back();
      out.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
      if (s + 1 == kSteps) break;
      const int32_t one[] = {forced ? (*forced)[pi][size_t(s)] : out.back()};
      model.forward_causal(one, cache, LogitRows::Last, logits);
      t.logits.push_back(logits);
    }
    t.tokens.push_back(out);
  }
  return t;
}

double largest_difference(const Trace& a, const Trace& b) {
  REQUIRE(a.logits.size() == b.logits.size());
  double worst = 0;
  for (size_t p = 0; p < a.logits.size(); ++p) {
    REQUIRE(a.logits[p].size() == b.logits[p].size());
    for (size_t i = 0; i < a.logits[p].size(); ++i)
      worst = std::max(worst, double(std::fabs(a.logits[p][i] - b.logits[p][i])));
  }
  return worst;
}

// For each source layer (-> its place in the widened model), every row routed alike.
void check_routing(const Trace& src, const Trace& wide, const std::map<int64_t, int64_t>& mapped) {
  for (const auto& [from, to] : mapped) {
    CAPTURE(from);
    REQUIRE(src.routing.experts.count(from) == 1);
    REQUIRE(wide.routing.experts.count(to) == 1);
    CHECK(src.routing.experts.at(from) == wide.routing.experts.at(to));
  }
}

// For the mapped layers: the share of rows routed to exactly the same experts, and the
// mean share of a row's experts in common.
std::pair<double, double> routing_agreement(const Trace& src, const Trace& wide, const std::map<int64_t, int64_t>& mapped) {
  const int64_t k = src.routing.k;
  REQUIRE(k > 0);
  int64_t rows = 0, same_rows = 0, common = 0;
  for (const auto& [from, to] : mapped) {
    const std::vector<int32_t>& a = src.routing.experts.at(from);
    const std::vector<int32_t>& b = wide.routing.experts.at(to);
    REQUIRE(a.size() == b.size());
    for (size_t r = 0; r < a.size(); r += size_t(k), ++rows) {
      std::vector<int32_t> both;
      std::set_intersection(a.begin() + long(r), a.begin() + long(r) + k, b.begin() + long(r), b.begin() + long(r) + k,
                            std::back_inserter(both));
      common += int64_t(both.size());
      same_rows += int64_t(both.size()) == k ? 1 : 0;
    }
  }
  return {double(same_rows) / double(rows), double(common) / double(rows * k)};
}

// Source layer i's place in the widened model: stride i + offset.
std::map<int64_t, int64_t> layer_map(int64_t layers, int64_t stride, int64_t offset) {
  std::map<int64_t, int64_t> m;
  for (int64_t i = 0; i < layers; ++i) m[i] = stride * i + offset;
  return m;
}

struct Widening {
  std::string source, shape;
  std::vector<std::string> extra;      // more generator options
  std::map<int64_t, int64_t> routed;  // MoE: source layer -> its place
};

const std::vector<Widening>& widenings() {
  static const std::vector<Widening> w = {
      {"tiny-qwen35", "qwen35-wide-test", {}, {}},
      {"tiny-qwen35moe", "qwen35moe-wide-test", {"--layers", "40"}, layer_map(8, 5, 4)}};
  return w;
}

// A copy of `src` (a tiny fixture) with its metadata changed by `edit`, at `out`.
template <class Edit>
void derive(const std::string& src, const std::string& out, Edit edit) {
  GgufWriter w = GgufWriter::from(GgufFile::open(src));
  edit(w);
  w.write(out);
}

// The tensor's values as floats.
std::vector<float> values(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo& t = f.require_tensor(name);
  std::vector<float> v(size_t(t.elements()));
  dequantize_row(t.type, f.tensor_data(t), v.data(), t.elements());
  return v;
}

// --inflate refuses SRC at SHAPE: exit 1, one line "cannot inflate SRC to SHAPE: EXPECTED...",
// and OUT (a TempFile's empty file) left as it was.
void check_refused(const std::string& src, const std::string& shape, const std::string& type, const std::string& out,
                   const std::vector<std::string>& extra, const std::string& expected) {
  const CliResult r = inflate(src, shape, type, out, extra);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("flashspec-make-fixtures: cannot inflate " + src + " to " + shape + ": " + expected) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(std::filesystem::file_size(out) == 0);
}

}  // namespace

// F32: every matrix holds the source's values (F16 ones stay F16), so what differs is the
// arithmetic alone: F32 sums in other orders, RoPE angles built over more pairs, the head
// norms' eps. Through the F16 head (activations rounded to fp16, as ggml does) an ulp of
// difference in a hidden value can move one activation by an fp16 step: logits then move by
// up to ~5e-3.
TEST_CASE("inflate: tiny-qwen35 and tiny-qwen35moe widened to F32 decode, score and route as their sources") {
  for (const Widening& c : widenings()) {
    CAPTURE(c.source);
    const std::string src = made_fixture_path(c.source);
    TempFile wide("inflate-f32");
    const CliResult r = inflate(src, c.shape, "f32", wide.path, c.extra);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const Trace a = decode(src), b = decode(wide.path);
    CHECK(a.tokens == b.tokens);
    const double worst = largest_difference(a, b);
    MESSAGE(c.source << " widened to F32: largest logit difference " << worst);
    CHECK(worst < 2e-2);
    check_routing(a, b, c.routed);
  }
}

// Q8_0 from a Q8_0 source (as the trained fixtures are): every block keeps its values
// (copied, or re-blocked with its scale and codes). The matrices multiply 8-bit activations,
// though, and ssm_out's input blocks hold other values than the source's (a state of 16 per
// head: a source block spans two heads, a widened one copies of one): the rounding moves
// these random, chaotic fixtures' logits by a few units (of ~50), less than quantizing the
// source moved them. Both compared on the same tokens (the Q8_0 source's greedy ones).
TEST_CASE("inflate: Q8_0 sources widened to Q8_0 keep every block's values") {
  for (const Widening& c : widenings()) {
    CAPTURE(c.source);
    const std::string f32 = made_fixture_path(c.source);
    TempFile q8("inflate-src-q8"), wide("inflate-q8");
    const CliResult q = run_cli({"quantize", f32, q8.path, "--type", "q8_0"});
    INFO(q.err);
    REQUIRE(q.exit_code == 0);
    const CliResult r = inflate(q8.path, c.shape, "q8_0", wide.path, c.extra);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find(" 0.00% re-quantized") != std::string::npos);
    const Trace a = decode(q8.path);
    const double widened = largest_difference(a, decode(wide.path, &a.tokens));
    const double quantized = largest_difference(a, decode(f32, &a.tokens));
    MESSAGE(c.source << " (Q8_0) widened to Q8_0: largest logit difference " << widened
                     << "; the Q8_0 source against its F32 original: " << quantized);
    CHECK(widened < quantized);
  }
}

// The trained fixtures (Q8_0 matrices, 8 layers and an MTP layer) widened to Q8_0 as
// benchmarks widen them: every block keeps its values, but the 8-bit rounding of
// attn_output's and ssm_out's inputs differs (head size and state 16: a source block spans
// two heads, a widened block one). That moves the residual a little, which flips a router's
// choice where two experts are that close (so almost every row routes as in the source,
// not every one: the F32 tests above show the exact case) and the greedy choice where the
// source's two best are that close. The logits stay within 1.0, as test_reference.cpp
// allows quantized files against llama.cpp.
constexpr double kTrainedTolerance = 1.0;

void check_greedy_but_near_ties(const Trace& src, const Trace& wide, double tolerance) {
  for (size_t pi = 0; pi < src.tokens.size(); ++pi)
    for (size_t s = 0; s < src.tokens[pi].size(); ++s) {
      if (src.tokens[pi][s] == wide.tokens[pi][s]) continue;
      std::vector<float> top = src.logits[src.first_step[pi] + s];
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      CAPTURE(pi);
      CAPTURE(s);
      CHECK(top[0] - top[1] <= 2 * tolerance);
    }
}

TEST_CASE("inflate: the trained fixtures widened to Q8_0 decode and route as their sources") {
  const Widening cases[] = {{"trained-qwen35", "qwen35-wide-test", {}, {}},
                            {"trained-qwen35moe", "qwen35moe-wide-test", {"--layers", "40"}, layer_map(8, 5, 4)}};
  for (const Widening& c : cases) {
    CAPTURE(c.source);
    const std::string src = std::string(FS_SOURCE_DIR) + "/tests/fixtures/" + c.source + ".gguf";
    if (!std::filesystem::exists(src)) {
      MESSAGE(src << " is not made yet: skipped");
      continue;
    }
    TempFile wide("inflate-trained");
    const CliResult r = inflate(src, c.shape, "q8_0", wide.path, c.extra);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find(" 0.00% re-quantized") != std::string::npos);
    // The widened model fed the source's greedy path, so that the logits compare position by
    // position; its own greedy choice at each step is the source's but where the source's
    // two best are closer than the logits part.
    const Trace a = decode(src), b = decode(wide.path, &a.tokens);
    const double worst = largest_difference(a, b);
    MESSAGE(c.source << " widened to Q8_0: largest logit difference " << worst);
    CHECK(worst < kTrainedTolerance);
    check_greedy_but_near_ties(a, b, worst);
    if (!c.routed.empty()) {
      const auto [rows, experts] = routing_agreement(a, b, c.routed);
      MESSAGE(c.source << " widened to Q8_0: " << rows << " of the rows routed to the same " << a.routing.k
                       << " experts in every source layer, "
                       << experts << " of the experts the same");
      CHECK(experts >= 0.97);
    }
  }
}

// A trained-layout file: tiny-qwen35moe with an MTP block after its 8 layers (a gated
// attention layer, here layer 3's tensors, and the nextn tensors). Its widened copy has the
// MTP block last, nextn_predict_layers kept, eh_proj's columns ([enorm(emb) ; hnorm(h)])
// and rows copied per half and the MTP norms divided by the width ratio; the main layers
// decode as the source's.
TEST_CASE("inflate: an MTP layer is widened as the last block") {
  TempFile src("inflate-mtp-src"), wide("inflate-mtp");
  const int64_t d = 64, D = 256, ratio = D / d;
  std::vector<float> eh(static_cast<size_t>(2 * d * d)), enorm(static_cast<size_t>(d));
  for (size_t i = 0; i < eh.size(); ++i) eh[i] = float(std::sin(0.7 * double(i)) / 8.0);
  for (size_t i = 0; i < enorm.size(); ++i) enorm[i] = 1.0f + float(i) / 64.0f;
  derive(made_fixture_path("tiny-qwen35moe"), src.path, [&](GgufWriter& w) {
    w.set("qwen35moe.block_count", gv_u32(9));
    w.set("qwen35moe.nextn_predict_layers", gv_u32(1));
    std::vector<TensorSpec> copies;
    const GgufFile f = GgufFile::open(made_fixture_path("tiny-qwen35moe"));
    for (const GgufTensorInfo& t : f.tensors())
      if (t.name.starts_with("blk.3.")) copies.push_back(*w.tensor(t.name));
    for (TensorSpec t : copies) {
      t.name = "blk.8." + t.name.substr(6);
      w.add_tensor(std::move(t));
    }
    w.add_tensor_f32("blk.8.nextn.eh_proj.weight", {2 * d, d}, eh);
    for (const char* n : {"enorm", "hnorm", "shared_head_norm"})
      w.add_tensor_f32(std::string("blk.8.nextn.") + n + ".weight", {d}, enorm);
  });
  const CliResult r = inflate(src.path, "qwen35moe-wide-test", "f32", wide.path);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const GgufFile f = GgufFile::open(wide.path);
  CHECK(f.require_uint("qwen35moe.block_count") == 13);
  CHECK(f.require_uint("qwen35moe.nextn_predict_layers") == 1);
  CHECK(f.require_tensor("blk.12.attn_q.weight").dims == std::vector<int64_t>{D, 2 * 8 * 64});
  CHECK(f.require_tensor("blk.12.ffn_gate_exps.weight").dims == std::vector<int64_t>{D, 64, 8});
  const std::vector<float> eh2 = values(f, "blk.12.nextn.eh_proj.weight");
  REQUIRE(eh2.size() == size_t(2 * D * D));
  bool same = true;
  for (int64_t y = 0; y < D; ++y)
    for (int64_t x = 0; x < 2 * D; ++x) {
      const int64_t sx = x < D ? x % d : d + (x - D) % d;
      same = same && eh2[size_t(y * 2 * D + x)] == eh[size_t((y % d) * 2 * d + sx)];
    }
  CHECK(same);
  for (const char* n : {"enorm", "hnorm", "shared_head_norm"}) {
    CAPTURE(n);
    const std::vector<float> v = values(f, std::string("blk.12.nextn.") + n + ".weight");
    REQUIRE(v.size() == size_t(D));
    for (int64_t x = 0; x < D; ++x) CHECK(v[size_t(x)] == enorm[size_t(x % d)] / float(ratio));
  }
  const Trace a = decode(src.path), b = decode(wide.path);
  CHECK(a.tokens == b.tokens);
  CHECK(largest_difference(a, b) < 2e-2);

  // --no-mtp: the main blocks alone, as llama.cpp's converter writes Qwen3.5; the same model.
  TempFile bare("inflate-no-mtp");
  const CliResult nr = inflate(src.path, "qwen35moe-wide-test", "f32", bare.path, {"--no-mtp"});
  INFO(nr.err);
  REQUIRE(nr.exit_code == 0);
  const GgufFile g = GgufFile::open(bare.path);
  CHECK(g.require_uint("qwen35moe.block_count") == 12);
  CHECK(!g.get_uint("qwen35moe.nextn_predict_layers"));
  size_t mtp_tensors = 0;
  for (const GgufTensorInfo& t : f.tensors()) mtp_tensors += t.name.starts_with("blk.12.");
  CHECK(mtp_tensors > 0);
  CHECK(g.tensors().size() == f.tensors().size() - mtp_tensors);
  for (const GgufTensorInfo& t : g.tensors()) CHECK(!t.name.starts_with("blk.12."));
  const Trace c = decode(bare.path);
  CHECK(c.tokens == b.tokens);
  CHECK(largest_difference(b, c) == 0.0);
}

TEST_CASE("inflate: what a shape cannot take exactly is refused with one line naming the dimension") {
  const std::string dense = made_fixture_path("tiny-qwen35"), moe = made_fixture_path("tiny-qwen35moe");
  TempFile derived("inflate-bad-src"), out("inflate-bad");
  std::string src = dense, shape = "qwen35-wide-test", expected;
  std::vector<std::string> extra;
  SUBCASE("another architecture") {
    src = model_path("tiny-qwen3");
    expected = "general.architecture is 'qwen3', not qwen35 or qwen35moe";
  }
  SUBCASE("a shape of the other Qwen3.5 architecture") {
    src = moe;
    expected = "the shape is qwen35's, the source qwen35moe's";
  }
  SUBCASE("fewer layers") {
    extra = {"--layers", "4"};
    expected = "block_count: 4 main layers are fewer than the source's 8";
  }
  SUBCASE("a width that does not divide the shape's") {
    derive(dense, derived.path, [](GgufWriter& w) {
      w.set("qwen35.embedding_length", gv_u32(96));
      const std::vector<uint64_t> dims = w.tensor("token_embd.weight")->dims;
      const GgmlType type = GgmlType(w.tensor("token_embd.weight")->type);
      w.remove_tensor("token_embd.weight");
      w.add_tensor("token_embd.weight", {96, int64_t(dims[1])}, type);
    });
    src = derived.path;
    expected = "embedding_length 256 is not a multiple of the source's 96";
  }
  SUBCASE("more heads per kv group") {
    derive(dense, derived.path, [](GgufWriter& w) { w.set("qwen35.attention.head_count", gv_u32(16)); });
    src = derived.path;
    expected = "attention.head_count: 8 heads over 2 kv heads leave fewer heads per kv group than the source's 8";
  }
  SUBCASE("RoPE dims that do not divide the shape's") {
    derive(dense, derived.path, [](GgufWriter& w) { w.set("qwen35.rope.dimension_count", gv_u32(12)); });
    src = derived.path;
    expected = "rope.dimension_count 32 is not a multiple of the source's 12";
  }
  SUBCASE("a DeltaNet state that does not divide the shape's") {
    derive(dense, derived.path, [](GgufWriter& w) {
      w.set("qwen35.ssm.state_size", gv_u32(24));
      w.set("qwen35.ssm.inner_size", gv_u32(96));
    });
    src = derived.path;
    expected = "ssm.state_size 32 is not a multiple of the source's 24";
  }
  SUBCASE("more value heads per key head") {
    derive(dense, derived.path, [](GgufWriter& w) {
      w.set("qwen35.ssm.time_step_rank", gv_u32(8));
      w.set("qwen35.ssm.inner_size", gv_u32(128));
    });
    src = derived.path;
    expected = "ssm.time_step_rank: 8 value heads over 4 key heads leave fewer per key head than the source's 4";
  }
  check_refused(src, shape, "q8_0", out.path, extra, expected);
}

// ---- llama (tests/fixture_inflate_llama.h) ----

// stories260K and salty279K (dim 64, 5 layers, 8 heads / 4 kv heads of 8) widened to
// llama-wide-test (dim 256, ffn 768, 6 layers, 16 heads / 4 kv heads of 32) in F32: the
// padded residual dims stay zero, Q is times 2 (exact), RoPE pairs 4 apart turn at the
// source's angles, so what differs is sums in other orders and those angles' last bits.
TEST_CASE("inflate: stories260K and salty279K widened to llama-wide-test F32 decode as their sources") {
  for (const std::string name : {"stories260K", "salty279K"}) {
    CAPTURE(name);
    const std::string src = model_path(name);
    TempFile wide("inflate-llama-f32");
    const CliResult r = inflate(src, "llama-wide-test", "f32", wide.path);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const GgufFile f = GgufFile::open(wide.path);
    CHECK(f.require_uint("llama.embedding_length") == 256);
    CHECK(f.require_uint("llama.block_count") == 6);
    CHECK(f.require_uint("llama.attention.head_count") == 16);
    CHECK(f.require_uint("llama.attention.key_length") == 32);  // 16 x 32 over a 256-wide residual
    CHECK(f.require_uint("llama.rope.dimension_count") == 32);
    CHECK(f.require_uint("llama.context_length") == 4096);
    CHECK(f.require_float("llama.attention.layer_norm_rms_epsilon") == double(float(1e-5f / 4.0)));
    const Trace a = decode(src), b = decode(wide.path);
    CHECK(a.tokens == b.tokens);
    const double worst = largest_difference(a, b);
    MESSAGE(name << " widened to llama-wide-test F32: largest logit difference " << worst);
    CHECK(worst < 1e-3);
  }
}

// The rows are made on every core, each from its own stream: one thread and three write the
// same bytes (Q4_0 and Q8_0 both). The Q8_0 file loads and generates; quantizing moves its
// logits a little (compared on the source's tokens).
TEST_CASE("inflate: a llama widening is the same file on 1 and 3 threads, and its Q8_0 generates") {
  const std::string src = model_path("stories260K");
  const fixtures::Shape shape = *fixtures::llama_inflate_shape("llama-wide-test");
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0}) {
    CAPTURE(type_name(type));
    TempFile one("inflate-llama-t1"), three("inflate-llama-t3");
    fixtures::inflate_llama(src, shape, "llama-wide-test", type, 1, one.path);
    fixtures::inflate_llama(src, shape, "llama-wide-test", type, 3, three.path);
    const std::vector<uint8_t> x = read_file(one.path), y = read_file(three.path);
    CHECK(x.size() > 1000000);
    CHECK(x == y);
    if (type != GgmlType::Q8_0) continue;
    const Trace a = decode(src), b = decode(one.path, &a.tokens);
    size_t same = 0, all = 0;
    for (size_t p = 0; p < a.tokens.size(); ++p)
      for (size_t s = 0; s < a.tokens[p].size(); ++s, ++all) same += a.tokens[p][s] == b.tokens[p][s];
    const double worst = largest_difference(a, b);
    MESSAGE("stories260K widened to llama-wide-test Q8_0: " << same << " of " << all
            << " greedy tokens the source's, largest logit difference " << worst);
    CHECK(worst < kTrainedTolerance);
    check_greedy_but_near_ties(a, b, worst);
  }
}

TEST_CASE("inflate: what a llama shape cannot take is refused with one line") {
  const std::string stories = model_path("stories260K");
  TempFile derived("inflate-llama-bad-src"), out("inflate-llama-bad");
  std::string src = stories, shape = "llama-wide-test", expected;
  std::vector<std::string> extra;
  SUBCASE("another architecture") {
    src = model_path("tiny-qwen3");
    expected = "general.architecture is 'qwen3', not llama";
  }
  SUBCASE("a shape of another architecture") {
    shape = "qwen35-wide-test";
    expected = "the shape is qwen35's, the source llama's";
  }
  SUBCASE("experts") {
    src = model_path("tiny-llama3moe");
    expected = "llama.expert_count is ";
  }
  SUBCASE("fewer layers") {
    extra = {"--layers", "3"};
    expected = "block_count: 3 layers are fewer than the source's 5";
  }
  SUBCASE("a head size that does not divide the shape's") {
    derive(stories, derived.path, [](GgufWriter& w) { w.set("llama.attention.key_length", gv_u32(12)); });
    src = derived.path;
    expected = "attention.key_length 32 is not a multiple of the source's head size 12";
  }
  SUBCASE("more kv heads") {
    derive(stories, derived.path, [](GgufWriter& w) { w.set("llama.attention.head_count_kv", gv_u32(8)); });
    src = derived.path;
    expected = "attention.head_count_kv 4 is less than the source's 8";
  }
  check_refused(src, shape, "q4_0", out.path, extra, expected);
}
