// flashspec-make-fixtures: the fixture models the project makes itself, for families with
// no small real checkpoint in ../shared/models (Qwen3.5's hybrid Gated DeltaNet + gated
// attention layers, dense and MoE). Random weights around the real Qwen3 tokenizer, copied
// from ../shared/models/tiny-qwen3.gguf. scripts/make-fixtures.sh runs it; the tests get
// the files through made_fixture_path() (tests/fixtures.h).
//
//   flashspec-make-fixtures SHARED_MODELS_DIR OUT_DIR
//       OUT_DIR/tiny-qwen35.gguf and OUT_DIR/tiny-qwen35moe.gguf (8 layers, dim 64)
//   flashspec-make-fixtures --shape qwen35moe-35b-a3b --type q4_0|q8_0 [--layers N]
//                           [--models SHARED_MODELS_DIR] OUT.gguf
//       random weights at the Qwen3.5-35B-A3B shape (~20 GB at q4_0), for benchmarks only;
//       streamed to disk, never held in memory.
//
// Every file is byte-identical from run to run and from machine to machine: the random
// numbers come from splitmix64 and a polar Box-Muller whose logarithm is computed here with
// + - * / only (IEEE exact, and the build forbids FMA contraction), not from <random>'s
// distributions or libm, whose results differ between implementations. Each tensor draws
// from its own stream (seeded by the file's seed and its name), so a tensor's values do not
// depend on the others. Files are written to a temporary name in the destination folder,
// synced and renamed into place: a concurrent reader sees the old file, or none, or the
// whole new one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"
#include "core/gguf_encode.h"
#include "core/half.h"

using namespace flashspec;

namespace {

constexpr const char* kProg = "flashspec-make-fixtures";
constexpr const char* kUsage =
    "usage: flashspec-make-fixtures SHARED_MODELS_DIR OUT_DIR | flashspec-make-fixtures --shape "
    "qwen35moe-35b-a3b --type q4_0|q8_0 [--layers N] [--models SHARED_MODELS_DIR] OUT.gguf";
constexpr uint64_t kAlignment = 32;

// ---- deterministic random numbers ----

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Natural log of x > 0 from frexp (exact) and the atanh series on [sqrt(1/2), sqrt(2)):
// log m = 2 z (1 + z^2/3 + z^4/5 + ...), z = (m - 1) / (m + 1), |z| <= 0.1716, so that 12
// terms reach double precision.
double det_log(double x) {
  static constexpr double kInvOdd[12] = {1.0 / 1,  1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                         1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23};
  int e = 0;
  double m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752) {
    m *= 2.0;
    e -= 1;
  }
  const double z = (m - 1.0) / (m + 1.0);
  const double z2 = z * z;
  double p = kInvOdd[11];
  for (int k = 10; k >= 0; --k) p = p * z2 + kInvOdd[k];
  return double(e) * 0.69314718055994531 + 2.0 * z * p;
}

// e^x for |x| <= 3 by its Taylor series (used for a handful of values).
double det_exp(double x) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 40; ++k) {
    term *= x / double(k);
    sum += term;
  }
  return sum;
}

struct Rng {
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t bits() { return splitmix64(state); }
  double uniform() { return double(bits() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // N(0, 1), Marsaglia's polar form of Box-Muller
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    for (;;) {
      const double u = 2.0 * uniform() - 1.0, v = 2.0 * uniform() - 1.0;
      const double s = u * u + v * v;
      if (s <= 0.0 || s >= 1.0) continue;
      const double m = std::sqrt(-2.0 * det_log(s) / s);
      spare = v * m;
      has_spare = true;
      return u * m;
    }
  }
  uint64_t state;
  double spare = 0.0;
  bool has_spare = false;
};

// ---- the model shapes ----

struct Shape {
  std::string arch;  // qwen35 or qwen35moe
  std::string name;  // general.name
  uint32_t layers = 8, context = 4096, embd = 64, ffn = 128;
  uint32_t heads = 4, heads_kv = 2, head_dim = 32;
  float rms_eps = 1e-6f, rope_base = 1e7f;
  uint32_t rope_dims = 16;
  std::array<int32_t, 4> rope_sections{3, 3, 2, 0};
  uint32_t conv_kernel = 4, ssm_state = 16, ssm_groups = 2, ssm_dt_rank = 4, ssm_inner = 64;
  uint32_t attn_interval = 4;
  bool moe = false;
  uint32_t experts = 0, experts_used = 0, expert_ffn = 0, shexp_ffn = 0;
  uint64_t vocab_rows = 0;  // 0: the tokenizer's token count; more: padded with unused tokens
  uint64_t seed = 0;
  GgmlType matrix_type = GgmlType::F32;  // the large matrices (and token_embd when not F32)
  GgmlType embd_type = GgmlType::F16;
  bool output_head = false;  // an output.weight of its own (else the head is token_embd)
  uint32_t file_type = 1;  // general.file_type (llama_ftype): 1 F16, 2 Q4_0, 7 Q8_0
};

Shape tiny_qwen35() {
  Shape s;
  s.arch = "qwen35";
  s.name = "tiny-qwen35";
  s.seed = 0x7135'0001'd15e'a5e5ull;
  return s;
}

Shape tiny_qwen35moe() {
  Shape s;
  s.arch = "qwen35moe";
  s.name = "tiny-qwen35moe";
  s.ffn = 64;
  s.moe = true;
  s.experts = 8;
  s.experts_used = 2;
  s.expert_ffn = 32;
  s.shexp_ffn = 64;
  s.seed = 0x7135'0002'3e7e'5eedull;
  return s;
}

Shape qwen35moe_35b_a3b(GgmlType type) {
  Shape s;
  s.arch = "qwen35moe";
  s.layers = 40;
  s.context = 262144;
  s.embd = 2048;
  s.ffn = 512;
  s.heads = 16;
  s.heads_kv = 2;
  s.head_dim = 256;
  s.rope_dims = 64;
  s.rope_sections = {11, 11, 10, 0};
  s.ssm_state = 128;
  s.ssm_groups = 16;
  s.ssm_dt_rank = 32;
  s.ssm_inner = 4096;
  s.moe = true;
  s.experts = 256;
  s.experts_used = 8;
  s.expert_ffn = 512;
  s.shexp_ffn = 512;
  s.vocab_rows = 248320;
  s.seed = 0x7135'35b0'a3b0'0001ull;
  s.matrix_type = type;
  s.embd_type = type;
  s.output_head = true;  // Qwen3.5-35B-A3B does not tie its head to the embedding
  s.file_type = type == GgmlType::Q4_0 ? 2 : 7;
  s.name = std::string("qwen35moe-35b-a3b-shape-random-") + (type == GgmlType::Q4_0 ? "q4_0" : "q8_0");
  return s;
}

bool recurrent_layer(const Shape& s, uint32_t l) { return (l + 1) % s.attn_interval != 0; }

// ---- metadata ----

GgufValue u32(uint64_t v) { return {GgufValueType::UINT32, uint64_t(v)}; }
GgufValue f32(float v) { return {GgufValueType::FLOAT32, double(v)}; }
GgufValue str(std::string v) { return {GgufValueType::STRING, std::move(v)}; }

using Metadata = std::vector<std::pair<std::string, GgufValue>>;

// The tokenizer.* keys of the source model, in its order, tokenizer.ggml.pre set to
// "qwen35"; with `rows` above the token count, the token list (and its per-token arrays)
// padded with unused tokens "<|fs_pad_ID|>".
Metadata tokenizer_metadata(const std::string& models_dir, uint64_t rows, uint64_t& n_vocab) {
  const std::string path = models_dir + "/tiny-qwen3.gguf";
  const GgufFile src = GgufFile::open(path);
  Metadata kv;
  for (const auto& [key, value] : src.metadata())
    if (key.starts_with("tokenizer.")) kv.emplace_back(key, value);
  bool have_pre = false;
  for (auto& [key, value] : kv) {
    if (key != "tokenizer.ggml.pre") continue;
    value = str("qwen35");
    have_pre = true;
  }
  if (!have_pre) kv.emplace_back("tokenizer.ggml.pre", str("qwen35"));

  const GgufArray& tokens = src.require_array("tokenizer.ggml.tokens");
  n_vocab = tokens.items.size();
  if (n_vocab == 0) throw Error(path + ": tokenizer.ggml.tokens is empty");
  if (rows != 0 && rows < n_vocab)
    throw Error(path + ": " + std::to_string(n_vocab) + " tokens, more than the shape's " +
                std::to_string(rows) + " embedding rows");
  if (rows > n_vocab) {
    for (auto& [key, value] : kv) {
      GgufArray* a = std::get_if<GgufArray>(&value.v);
      if (!a || a->items.size() != n_vocab) continue;
      if (key == "tokenizer.ggml.tokens") {
        for (uint64_t id = n_vocab; id < rows; ++id)
          a->items.push_back(str("<|fs_pad_" + std::to_string(id) + "|>"));
      } else if (key == "tokenizer.ggml.token_type") {
        const GgufValue unused = a->elem_type == GgufValueType::INT32
                                     ? GgufValue{GgufValueType::INT32, int64_t(5)}
                                     : GgufValue{a->elem_type, uint64_t(5)};
        a->items.resize(rows, unused);
      } else if (key == "tokenizer.ggml.scores") {
        a->items.resize(rows, GgufValue{a->elem_type, 0.0});
      }
    }
    n_vocab = rows;
  }
  return kv;
}

Metadata model_metadata(const Shape& s, Metadata tokenizer) {
  const std::string& A = s.arch;
  Metadata kv;
  auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
  set("general.architecture", str(A));
  set("general.name", str(s.name));
  set("general.alignment", u32(kAlignment));
  set("general.file_type", u32(s.file_type));
  set(A + ".block_count", u32(s.layers));
  set(A + ".context_length", u32(s.context));
  set(A + ".embedding_length", u32(s.embd));
  set(A + ".feed_forward_length", u32(s.ffn));
  set(A + ".attention.head_count", u32(s.heads));
  set(A + ".attention.head_count_kv", u32(s.heads_kv));
  set(A + ".attention.key_length", u32(s.head_dim));
  set(A + ".attention.value_length", u32(s.head_dim));
  set(A + ".attention.layer_norm_rms_epsilon", f32(s.rms_eps));
  set(A + ".rope.freq_base", f32(s.rope_base));
  set(A + ".rope.dimension_count", u32(s.rope_dims));
  std::vector<GgufValue> sections;
  for (int32_t v : s.rope_sections) sections.push_back({GgufValueType::INT32, int64_t(v)});
  set(A + ".rope.dimension_sections", {GgufValueType::ARRAY, GgufArray{GgufValueType::INT32, sections}});
  set(A + ".ssm.conv_kernel", u32(s.conv_kernel));
  set(A + ".ssm.state_size", u32(s.ssm_state));
  set(A + ".ssm.group_count", u32(s.ssm_groups));
  set(A + ".ssm.time_step_rank", u32(s.ssm_dt_rank));
  set(A + ".ssm.inner_size", u32(s.ssm_inner));
  set(A + ".full_attention_interval", u32(s.attn_interval));
  if (s.moe) {
    set(A + ".expert_count", u32(s.experts));
    set(A + ".expert_used_count", u32(s.experts_used));
    set(A + ".expert_feed_forward_length", u32(s.expert_ffn));
    set(A + ".expert_shared_feed_forward_length", u32(s.shexp_ffn));
  }
  for (auto& e : tokenizer) kv.push_back(std::move(e));
  return kv;
}

// ---- tensors ----

enum class Fill {
  Normal,   // N(0, std^2)
  NormOne,  // 1 + 0.1 N(0, 1): norm weights
  SsmA,     // -exp(u), u uniform in [log 0.1, log 2]
};

struct Plan {
  GgufTensorLayout layout;
  Fill fill = Fill::Normal;
  double std = 1.0;
};

std::vector<Plan> tensor_plan(const Shape& s, int64_t n_vocab) {
  std::vector<Plan> out;
  const int64_t E = s.embd;
  auto add = [&](std::string name, std::vector<int64_t> dims, GgmlType type, Fill fill, double std) {
    out.push_back({GgufTensorLayout{std::move(name), std::move(dims), type}, fill, std});
  };
  // A weight matrix (2-D or 3-D) in the shape's matrix type, std 1/sqrt(fan_in).
  auto matrix = [&](std::string name, std::vector<int64_t> dims) {
    const double std = 1.0 / std::sqrt(double(dims[0]));
    add(std::move(name), std::move(dims), s.matrix_type, Fill::Normal, std);
  };
  auto f32_normal = [&](std::string name, std::vector<int64_t> dims, double std) {
    add(std::move(name), std::move(dims), GgmlType::F32, Fill::Normal, std);
  };
  auto norm = [&](std::string name, int64_t n) { add(std::move(name), {n}, GgmlType::F32, Fill::NormOne, 0.0); };

  add("token_embd.weight", {E, n_vocab}, s.embd_type, Fill::Normal, 1.0);
  norm("output_norm.weight", E);
  if (s.output_head) matrix("output.weight", {E, n_vocab});
  const int64_t S = s.ssm_state, Hk = s.ssm_groups, Hv = s.ssm_dt_rank;
  const int64_t value_dim = s.ssm_inner, conv_dim = 2 * Hk * S + Hv * S;
  const int64_t hd = s.head_dim, q_dim = int64_t(s.heads) * hd, kv_dim = int64_t(s.heads_kv) * hd;
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", E);
    norm(b + "post_attention_norm.weight", E);
    if (recurrent_layer(s, l)) {  // Gated DeltaNet
      matrix(b + "attn_qkv.weight", {E, conv_dim});
      matrix(b + "attn_gate.weight", {E, value_dim});
      f32_normal(b + "ssm_conv1d.weight", {int64_t(s.conv_kernel), conv_dim}, 0.5);
      f32_normal(b + "ssm_dt.bias", {Hv}, 0.5);
      add(b + "ssm_a", {Hv}, GgmlType::F32, Fill::SsmA, 0.0);
      f32_normal(b + "ssm_beta.weight", {E, Hv}, 1.0 / std::sqrt(double(E)));
      f32_normal(b + "ssm_alpha.weight", {E, Hv}, 1.0 / std::sqrt(double(E)));
      norm(b + "ssm_norm.weight", S);
      matrix(b + "ssm_out.weight", {value_dim, E});
    } else {  // gated attention: Q carries a per-head output gate, twice as wide
      matrix(b + "attn_q.weight", {E, 2 * q_dim});
      matrix(b + "attn_k.weight", {E, kv_dim});
      matrix(b + "attn_v.weight", {E, kv_dim});
      matrix(b + "attn_output.weight", {q_dim, E});
      norm(b + "attn_q_norm.weight", hd);
      norm(b + "attn_k_norm.weight", hd);
    }
    if (!s.moe) {
      matrix(b + "ffn_gate.weight", {E, int64_t(s.ffn)});
      matrix(b + "ffn_up.weight", {E, int64_t(s.ffn)});
      matrix(b + "ffn_down.weight", {int64_t(s.ffn), E});
    } else {
      const int64_t X = s.experts, F = s.expert_ffn, SF = s.shexp_ffn;
      // Router: logits of std ~4 for unit inputs (0.5 at dim 64), so that routing is decisive.
      f32_normal(b + "ffn_gate_inp.weight", {E, X}, 4.0 / std::sqrt(double(E)));
      matrix(b + "ffn_gate_exps.weight", {E, F, X});
      matrix(b + "ffn_up_exps.weight", {E, F, X});
      matrix(b + "ffn_down_exps.weight", {F, E, X});
      f32_normal(b + "ffn_gate_inp_shexp.weight", {E}, 1.0 / std::sqrt(double(E)));
      matrix(b + "ffn_gate_shexp.weight", {E, SF});
      matrix(b + "ffn_up_shexp.weight", {E, SF});
      matrix(b + "ffn_down_shexp.weight", {SF, E});
    }
  }
  return out;
}

// ---- the streaming writer ----

// The temporary file being written, removed on SIGINT/SIGTERM (a fixed buffer: the handler
// may only call async-signal-safe functions).
char g_temp_path[4096];

extern "C" void on_signal(int sig) {
  if (g_temp_path[0] != '\0') ::unlink(g_temp_path);
  ::_exit(128 + sig);
}

std::string errno_text() { return std::strerror(errno); }

class StreamFile {
 public:
  // A temporary file beside `path`, renamed to it by commit().
  explicit StreamFile(std::string path) : path_(std::move(path)) {
    const std::filesystem::path p(path_);
    const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
    std::string tmpl = dir + "/." + p.filename().string() + ".tmp-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    fd_ = ::mkstemp(buf.data());
    if (fd_ < 0) throw Error(path_ + ": cannot create a temporary file in " + dir + ": " + errno_text());
    temp_ = buf.data();
    if (temp_.size() < sizeof g_temp_path) std::memcpy(g_temp_path, temp_.c_str(), temp_.size() + 1);
    const mode_t mask = ::umask(0);  // mkstemp makes 0600; a model file is as readable as any other
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
    buf_.reserve(kBuffer);
  }
  StreamFile(const StreamFile&) = delete;
  StreamFile& operator=(const StreamFile&) = delete;
  ~StreamFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
    g_temp_path[0] = '\0';
  }

  uint64_t position() const { return pos_; }
  void write(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    pos_ += n;
    while (n > 0) {
      const size_t take = std::min(n, kBuffer - buf_.size());
      buf_.insert(buf_.end(), p, p + take);
      p += take;
      n -= take;
      if (buf_.size() == kBuffer) flush();
    }
  }
  void pad_to(uint64_t at) {
    static const uint8_t zeros[64] = {};
    while (pos_ < at) write(zeros, size_t(std::min<uint64_t>(sizeof zeros, at - pos_)));
  }
  void commit() {
    flush();
    if (::fsync(fd_) != 0) throw Error(temp_ + ": fsync failed: " + errno_text());
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw Error(temp_ + ": close failed: " + errno_text());
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      throw Error(path_ + ": cannot rename " + temp_ + " into place: " + errno_text());
    committed_ = true;
    g_temp_path[0] = '\0';
  }

 private:
  static constexpr size_t kBuffer = size_t(8) << 20;
  void flush() {
    const uint8_t* p = buf_.data();
    size_t n = buf_.size();
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error(temp_ + ": write failed: " + errno_text());
      p += w;
      n -= size_t(w);
    }
    buf_.clear();
  }

  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buf_;
};

// Mean square of the codes (q - 8) of Q4_0 and q of Q8_0 when the codes are uniform.
constexpr double kQ4Mean2 = (16.0 * 16.0 - 1.0) / 12.0 + 0.25;
constexpr double kQ8Mean2 = (256.0 * 256.0 - 1.0) / 12.0 + 0.25;

// Writes one tensor's data, generated in chunks.
void emit_tensor(StreamFile& f, const Plan& plan, uint64_t file_seed) {
  const GgufTensorLayout& t = plan.layout;
  uint64_t seed_state = file_seed ^ fnv1a64(t.name);
  Rng rng(splitmix64(seed_state));
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  constexpr int64_t kChunk = int64_t(1) << 16;  // elements, whole blocks
  std::vector<uint8_t> buf;
  auto value = [&]() -> double {
    switch (plan.fill) {
      case Fill::Normal: return plan.std * rng.normal();
      case Fill::NormOne: return 1.0 + 0.1 * rng.normal();
      case Fill::SsmA: {
        const double lo = det_log(0.1), hi = det_log(2.0);
        return -det_exp(lo + (hi - lo) * rng.uniform());
      }
    }
    return 0.0;
  };
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    buf.resize(size_t(row_bytes(t.type, m)));
    uint8_t* p = buf.data();
    switch (t.type) {
      case GgmlType::F32:
        for (int64_t i = 0; i < m; ++i, p += 4) {
          const float v = float(value());
          std::memcpy(p, &v, 4);
        }
        break;
      case GgmlType::F16:
        for (int64_t i = 0; i < m; ++i, p += 2) {
          const uint16_t h = float_to_fp16(float(value()));
          p[0] = uint8_t(h & 0xff);
          p[1] = uint8_t(h >> 8);
        }
        break;
      case GgmlType::Q4_0:
      case GgmlType::Q8_0: {
        // Uniform random codes; the block scale's sign is random too, so that the weights
        // have mean 0, and its size gives them the plan's std.
        const bool q4 = t.type == GgmlType::Q4_0;
        const double d = plan.std / std::sqrt(q4 ? kQ4Mean2 : kQ8Mean2);
        const uint16_t d_pos = float_to_fp16(float(d)), d_neg = uint16_t(d_pos | 0x8000);
        for (int64_t blk = 0; blk < m / 32; ++blk) {
          const uint16_t dh = (rng.bits() & 1) ? d_neg : d_pos;
          *p++ = uint8_t(dh & 0xff);
          *p++ = uint8_t(dh >> 8);
          for (int w = 0; w < (q4 ? 2 : 4); ++w) {
            const uint64_t r = rng.bits();
            for (int k = 0; k < 8; ++k) *p++ = uint8_t(r >> (8 * k));
          }
        }
        break;
      }
      default: throw Error("internal: no generator for " + std::string(type_name(t.type)));
    }
    if (p != buf.data() + buf.size()) throw Error("internal: " + t.name + ": a chunk of the wrong size");
    f.write(buf.data(), buf.size());
  }
}

void write_model(const std::string& path, const Shape& s, Metadata tokenizer, int64_t n_vocab) {
  std::vector<Plan> plans = tensor_plan(s, n_vocab);
  std::vector<GgufTensorLayout> layout;
  for (const Plan& p : plans) {
    if (p.layout.type != GgmlType::F32 && p.layout.type != GgmlType::F16 &&
        p.layout.dims[0] % traits(p.layout.type).block_elems != 0)
      throw Error("internal: " + p.layout.name + " rows are not whole blocks");
    layout.push_back(p.layout);
  }
  const std::vector<uint8_t> header = gguf_header(model_metadata(s, std::move(tokenizer)), layout, kAlignment);
  for (size_t i = 0; i < plans.size(); ++i) plans[i].layout = layout[i];

  StreamFile f(path);
  f.write(header.data(), header.size());
  const uint64_t data_start = header.size();
  for (const Plan& p : plans) {
    f.pad_to(data_start + p.layout.offset);
    emit_tensor(f, p, s.seed);
    if (f.position() != data_start + p.layout.offset + p.layout.nbytes)
      throw Error("internal: " + p.layout.name + ": wrote a size other than its layout's");
  }
  f.commit();
}

// ---- command line ----

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  if (!args.empty() && args[0].starts_with("--")) {
    std::string shape, type, out, models;
    std::optional<uint32_t> layers;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw Error(a + " needs a value; " + kUsage);
        return args[++i];
      };
      if (a == "--shape") shape = value();
      else if (a == "--type") type = value();
      else if (a == "--models") models = value();
      else if (a == "--layers") {
        const std::string& v = value();
        char* end = nullptr;
        errno = 0;
        const unsigned long n = std::strtoul(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno != 0 || n == 0 || n > 4096 || v[0] == '-')
          throw Error("--layers: '" + v + "' is not a layer count from 1 to 4096");
        layers = uint32_t(n);
      } else if (a.starts_with("-")) throw Error("unknown option '" + a + "'; " + kUsage);
      else if (out.empty()) out = a;
      else throw Error("more than one output file ('" + out + "', '" + a + "'); " + kUsage);
    }
    if (shape != "qwen35moe-35b-a3b")
      throw Error(shape.empty() ? std::string("--shape is missing; ") + kUsage
                                : "unknown --shape '" + shape + "' (known: qwen35moe-35b-a3b)");
    GgmlType qtype;
    if (type == "q4_0") qtype = GgmlType::Q4_0;
    else if (type == "q8_0") qtype = GgmlType::Q8_0;
    else throw Error(type.empty() ? std::string("--type is missing (q4_0 or q8_0)")
                                  : "unknown --type '" + type + "' (q4_0 or q8_0)");
    if (out.empty()) throw Error(std::string("no output file; ") + kUsage);
    if (models.empty()) {
      const char* env = std::getenv("FLASHSPEC_SHARED_DIR");
      models = std::string(env && *env ? env : FS_SHARED_DIR) + "/models";
    }
    Shape s = qwen35moe_35b_a3b(qtype);
    if (layers) s.layers = *layers;
    uint64_t n_vocab = 0;
    Metadata tok = tokenizer_metadata(models, s.vocab_rows, n_vocab);
    write_model(out, s, std::move(tok), int64_t(n_vocab));
    return 0;
  }
  if (args.size() != 2) throw Error(kUsage);
  const std::string models = args[0], out_dir = args[1];
  uint64_t n_vocab = 0;
  const Metadata tok = tokenizer_metadata(models, 0, n_vocab);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir + ": cannot create the folder: " + ec.message());
  for (const Shape& s : {tiny_qwen35(), tiny_qwen35moe()})
    write_model(out_dir + "/" + s.name + ".gguf", s, tok, int64_t(n_vocab));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';
    std::fprintf(stderr, "%s: %s\n", kProg, msg.c_str());
    return 1;
  }
}
