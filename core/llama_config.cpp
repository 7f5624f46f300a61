#include "core/llama_config.h"

#include "core/error.h"
#include "core/gguf.h"

namespace flashspec {

namespace {

// Bounds that no real model exceeds; they keep hostile metadata from driving huge
// allocations (KV cache, activations) or integer overflow downstream.
constexpr int64_t kMaxDim = 1 << 17;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 1 << 14;
constexpr int64_t kMaxVocab = 1 << 22;

int64_t bounded(const GgufFile& f, const std::string& key, uint64_t v, int64_t lo, int64_t hi) {
  if (v < uint64_t(lo) || v > uint64_t(hi))
    throw Error(f.path() + ": key '" + key + "' = " + std::to_string(v) + " is outside [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return int64_t(v);
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const GgufFile& f) {
  LlamaConfig c;
  c.arch = f.require_string("general.architecture");
  if (c.arch != "llama")
    throw Error(f.path() + ": unsupported architecture '" + c.arch + "' (only llama is supported)");
  const std::string p = c.arch + ".";
  c.dim = bounded(f, p + "embedding_length", f.require_uint(p + "embedding_length"), 1, kMaxDim);
  c.n_layers = bounded(f, p + "block_count", f.require_uint(p + "block_count"), 1, kMaxLayers);
  c.n_heads = bounded(f, p + "attention.head_count", f.require_uint(p + "attention.head_count"), 1,
                      kMaxHeads);
  c.n_kv_heads = c.n_heads;
  if (auto v = f.get_uint(p + "attention.head_count_kv"))
    c.n_kv_heads = bounded(f, p + "attention.head_count_kv", *v, 1, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    throw Error(f.path() + ": head_count " + std::to_string(c.n_heads) +
                " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  c.ffn_dim = bounded(f, p + "feed_forward_length", f.require_uint(p + "feed_forward_length"), 1,
                      kMaxDim * 8);
  if (c.dim % c.n_heads != 0)
    throw Error(f.path() + ": embedding_length " + std::to_string(c.dim) +
                " is not a multiple of head_count " + std::to_string(c.n_heads));
  c.head_dim = c.dim / c.n_heads;
  if (auto v = f.get_uint(p + "attention.key_length"))
    c.head_dim = bounded(f, p + "attention.key_length", *v, 1, kMaxDim);
  if (auto v = f.get_uint(p + "attention.value_length"); v && int64_t(*v) != c.head_dim)
    throw Error(f.path() + ": attention.value_length differs from key_length (unsupported)");
  c.n_rot = c.head_dim;
  if (auto v = f.get_uint(p + "rope.dimension_count"))
    c.n_rot = bounded(f, p + "rope.dimension_count", *v, 2, c.head_dim);
  if (c.n_rot % 2 != 0) throw Error(f.path() + ": rope.dimension_count must be even");
  c.context_length = 4096;
  if (auto v = f.get_uint(p + "context_length"))
    c.context_length = bounded(f, p + "context_length", *v, 1, int64_t(1) << 24);
  if (auto v = f.get_float(p + "attention.layer_norm_rms_epsilon")) c.rms_eps = float(*v);
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f))
    throw Error(f.path() + ": layer_norm_rms_epsilon must be in (0, 1)");
  if (auto v = f.get_float(p + "rope.freq_base")) c.rope_freq_base = float(*v);
  if (!(c.rope_freq_base > 1.0f && c.rope_freq_base < 1e12f))
    throw Error(f.path() + ": rope.freq_base must be in (1, 1e12)");
  if (const std::string* s = f.get_string(p + "rope.scaling.type"); s && *s != "none")
    throw Error(f.path() + ": rope scaling '" + *s + "' is not supported");

  const GgufTensorInfo& emb = f.require_tensor("token_embd.weight");
  if (emb.dims.size() != 2 || emb.dims[0] != c.dim)
    throw Error(f.path() + ": tensor 'token_embd.weight' must be [" + std::to_string(c.dim) +
                ", n_vocab]");
  c.n_vocab = emb.dims[1];
  if (c.n_vocab < 1 || c.n_vocab > kMaxVocab)
    throw Error(f.path() + ": vocabulary of " + std::to_string(c.n_vocab) + " tokens is out of range");
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace flashspec
