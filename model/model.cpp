#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/printable.h"
#include "model/kv_footprint.h"
#include "model/moe_routing.h"
#include "offload/mapping_copy.h"

namespace flashspec {

std::vector<int32_t> consecutive_positions(int64_t start, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = int32_t(start + i);
  return p;
}

Model::Model(const std::string& path, Backend& backend) : Model(GgufFile::open(path), backend) {}

Model::Model(GgufFile file, Backend& backend)
    : file_(std::move(file)),
      config_(ModelConfig::from_gguf(file_)),
      arch_(architecture_of(config_)),
      weights_(file_, config_),
      backend_(backend),
      placed_(weights_, backend) {
  if (backend.host_memory()) layers_ = std::make_unique<ResidentLayers>(weights_);
  for (int64_t l = 0; l < config_.n_layers && first_expert_layer_ < 0; ++l)
    if (arch_.layers[size_t(l)].ffn != FfnBlock::Dense) first_expert_layer_ = l;
  if (first_expert_layer_ >= 0) token_routes_.emplace(config_.n_layers, config_.n_experts_used);
  if (weights_.ple_table.data) ple_rows_ = std::make_unique<PleRows>(weights_.ple_table);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    int64_t bytes = 0;  // one expert's slices of the expert tensors
    for (const LayerMatrixTensor& m : weights_.layer_matrices(l))
      if (m.spec.experts > 1) bytes += int64_t(m.tensor->nbytes) / m.spec.experts;
    expert_bytes_.push_back(bytes);
  }
  expert_layers_after_.assign(size_t(config_.n_layers), 0);
  for (int64_t l = config_.n_layers - 2; l >= 0; --l)
    expert_layers_after_[size_t(l)] =
        expert_layers_after_[size_t(l + 1)] + (arch_.layers[size_t(l + 1)].ffn != FfnBlock::Dense);
}

uint64_t Model::load_head_into_memory() {
  if (!backend_.host_memory()) throw Error("internal: loading weights into memory for a backend with its own");
  // An image parsed from memory is the process's own memory already; and a head copied
  // once is no longer in the mapping (copy_from_mapping would discard it).
  if (!file_.mapped() || !output_copy_.empty()) return 0;
  const auto* head = static_cast<const uint8_t*>(weights_.output.data);
  const uint64_t bytes = uint64_t(matrix_bytes(weights_.output));
  output_copy_ = copy_out_of_mapping({head, size_t(bytes)});
  placed_.output.data = output_copy_.data();
  return bytes;
}

Model::BatchInputs Model::place_inputs(std::span<const PassPart> parts) {
  pass_tokens_.clear();
  pass_positions_.clear();
  for (const PassPart& p : parts) {
    pass_tokens_.insert(pass_tokens_.end(), p.chunk.tokens.begin(), p.chunk.tokens.end());
    pass_positions_.insert(pass_positions_.end(), p.chunk.positions.begin(), p.chunk.positions.end());
  }
  BatchInputs in{pass_tokens_.data(), pass_positions_.data(), {}};
  if (backend_.host_memory()) {
    for (const PassPart& p : parts) in.masks.push_back(p.chunk.mask.empty() ? nullptr : p.chunk.mask.data());
    return in;
  }
  // One upload for all: ids and positions first (4-byte aligned), then the masks.
  const size_t ids = pass_tokens_.size() * sizeof(int32_t), pos = pass_positions_.size() * sizeof(int32_t);
  size_t masks = 0;
  for (const PassPart& p : parts) masks += p.chunk.mask.size_bytes();
  inputs_host_.resize(ids + pos + masks);
  std::memcpy(inputs_host_.data(), pass_tokens_.data(), ids);
  std::memcpy(inputs_host_.data() + ids, pass_positions_.data(), pos);
  inputs_.reserve(backend_, inputs_host_.size());
  const uint8_t* base = inputs_.get<uint8_t>();
  size_t at = ids + pos;
  for (const PassPart& p : parts) {
    std::memcpy(inputs_host_.data() + at, p.chunk.mask.data(), p.chunk.mask.size_bytes());
    in.masks.push_back(p.chunk.mask.empty() ? nullptr : base + at);
    at += p.chunk.mask.size_bytes();
  }
  backend_.upload(inputs_.get(), inputs_host_.data(), inputs_host_.size());
  in.tokens = reinterpret_cast<const int32_t*>(base);
  in.positions = reinterpret_cast<const int32_t*>(base + ids);
  return in;
}

void Model::forward_causal(std::span<const int32_t> tokens, SequenceCache& cache, LogitRows rows,
                                std::vector<float>& logits) {
  const std::vector<int32_t> pos = consecutive_positions(cache.committed() + cache.pending(), int64_t(tokens.size()));
  forward(ForwardBatch{tokens, pos, {}}, cache, rows, logits);
}

void Model::forward(const ForwardBatch& b, SequenceCache& cache, LogitRows rows, std::vector<float>& logits) {
  const SequenceBatch one{b, &cache, rows, &logits};
  forward_many({&one, 1});
}

void Model::forward_many(std::span<const SequenceBatch> seqs) {
  const ModelConfig& c = config_;
  struct Progress {
    int64_t T, P0, first_logit, done = 0;
  };
  std::vector<Progress> prog;
  for (const SequenceBatch& s : seqs) {
    const ForwardBatch& b = s.batch;
    const int64_t T = int64_t(b.tokens.size());
    if (T == 0) throw Error("forward: empty batch");
    const int64_t P0 = s.cache->pending();
    if (int64_t(b.positions.size()) != T || (!b.mask.empty() && int64_t(b.mask.size()) != T * (P0 + T)))
      throw Error("forward: positions/mask do not match the batch size");
    for (int32_t id : b.tokens)
      if (id < 0 || id >= c.n_vocab)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(c.n_vocab) +
                    " of " + file_.path());
    s.cache->prepare_rows(T);
    if (s.pruned) s.pruned->assign(size_t(T), 0);
    if (!b.mask.empty()) s.cache->check_tree_room(T);
    for (size_t j = 0; j < prog.size(); ++j)
      if (seqs[j].cache == s.cache) throw Error("internal: two batches of one pass share a cache");
    const int64_t first_logit = s.rows == LogitRows::All ? 0 : s.rows == LogitRows::Last ? T - 1 : T;
    s.logits->resize(size_t((T - first_logit) * c.n_vocab));
    if (s.hidden) s.hidden->resize(size_t(T * c.dim));
    prog.push_back({T, P0, first_logit});
  }
  file_.check_unchanged();  // a shrunk file would fault on the mapping mid-pass

  // Each pass takes the next rows of every sequence in turn, at most max_batch_ in all.
  std::vector<PassPart> parts;
  if (chunk_masks_.size() < seqs.size()) chunk_masks_.resize(seqs.size());
  for (;;) {
    parts.clear();
    int64_t room = max_batch_;
    for (size_t i = 0; i < seqs.size() && room > 0; ++i) {
      Progress& g = prog[i];
      const ForwardBatch& b = seqs[i].batch;
      const int64_t a = g.done, n = std::min(room, g.T - a);
      if (n == 0) continue;
      ForwardBatch chunk{b.tokens.subspan(size_t(a), size_t(n)), b.positions.subspan(size_t(a), size_t(n)), {}};
      if (!b.mask.empty()) {
        // Rows a..a+n of the tree mask, over the rows pending before them: P0 + a + n columns.
        const int64_t cols = g.P0 + a + n;
        std::vector<uint8_t>& m = chunk_masks_[i];
        m.resize(size_t(n * cols));
        for (int64_t r = 0; r < n; ++r)
          std::memcpy(m.data() + r * cols, b.mask.data() + (a + r) * (g.P0 + g.T), size_t(cols));
        chunk.mask = m;
      }
      const int64_t from = std::max<int64_t>(g.first_logit - a, 0);
      float* out = from < n ? seqs[i].logits->data() + (a + from - g.first_logit) * c.n_vocab : nullptr;
      float* hidden = seqs[i].hidden ? seqs[i].hidden->data() + a * c.dim : nullptr;
      PassPart part{chunk, seqs[i].cache, from, out, hidden};
      if (seqs[i].pruned && a == 0 && n == g.T && int64_t(seqs[i].row_value_ms.size()) == n) {
        part.value_ms = seqs[i].row_value_ms.data();
        part.pruned = seqs[i].pruned->data();
      }
      parts.push_back(part);
      g.done += n;
      room -= n;
    }
    if (parts.empty()) return;
    forward_pass(parts);
  }
}

SequenceCache Model::make_cache(int64_t capacity) const {
  const ModelConfig& c = config_;
  const KvFootprint f = kv_footprint(c, key_type_, value_type_, capacity, ring_slack());
  if (!f.ring) return make_cache(KvCache(backend_, kv_widths(c), capacity, key_type_, value_type_));
  SequenceCache cache(KvCache(backend_, kv_widths(c, false), capacity, key_type_, value_type_),
                      KvCache(backend_, kv_widths(c, true), capacity, key_type_, value_type_,
                              WindowRing{c.sliding_window, ring_slack()}),
                      kv_slots(c, true));
  if (c.hybrid()) cache.set_recurrent(std::make_unique<RecurrentState>(c, backend_));
  return cache;
}

SequenceCache Model::make_cache(KvCache kv) const {
  SequenceCache c(std::move(kv), kv_slots(config_, false));
  if (config_.hybrid()) c.set_recurrent(std::make_unique<RecurrentState>(config_, backend_));
  return c;
}

ExpertCounters Model::expert_counters() const {
  ExpertCounters e = expert_counters_;
  if (layers_) {
    const ExpertCounters r = layers_->expert_reads();
    e.read = r.read;
    e.read_bytes = r.read_bytes;
    e.hits = r.hits;
  }
  return e;
}


void Model::forward_pass(std::span<const PassPart> parts) {
  const int64_t T = rows_of(parts);
  if (!layers_)  // a backend with memory of its own has no default: its placement sets one
    throw Error("internal: no layer source for a model on a backend with its own memory (target/staged_layers.h)");
  const BatchInputs in = place_inputs(parts);
  act_.reserve(backend_, size_t(Activations::bytes(config_, T)));
  const Activations a = Activations::carve(act_.get<float>(), config_, T);

  backend_.get_rows(placed_.embedding, in.tokens, T, a.x);
  if (config_.embedding_scale != 1.0f) backend_.scale(a.x, config_.embedding_scale, T * config_.dim);
  if (config_.per_layer_input_dim > 0) per_layer_inputs(a, T);
  if (config_.hybrid()) begin_recurrent_rows(parts);
  begin_row_pruning(parts);
  // The first expert layer's reads start now, from the tokens' past routing, overlapping
  // the embedding and the layer's mixer (the later layers' are guessed by the layer before).
  if (token_guess_ && token_routes_kept()) {
    const std::vector<int32_t> likely = token_routes_->guess(first_expert_layer_, pass_tokens_);
    if (!likely.empty()) layers_->guess(first_expert_layer_, likely);
  }
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const LayerWeights w = layers_->acquire(l);
    const LayerBlocks& blocks = arch_.layers[size_t(l)];
    switch (blocks.mixer) {
      case MixerBlock::Attention: attention_block(l, w, parts, in, a); break;
      case MixerBlock::DeltaNet: delta_net_block(l, w, parts, a); break;
    }
    switch (blocks.ffn) {
      case FfnBlock::Dense: dense_ffn_block(l, w, T, a); break;
      case FfnBlock::Experts: experts_ffn_block(l, w, T, a, *layers_); break;
      case FfnBlock::DenseAndExperts: dense_and_experts_block(l, w, T, a, *layers_); break;
    }
    if (blocks.per_layer_input) per_layer_input_block(l, w, T, a);
    if (const float* s = blocks.output_scale ? weights_.host_vector(l, LayerVector::OutScale) : nullptr)
      backend_.scale(a.x, *s, T * config_.dim);
    layers_->release(l);
  }
  end_row_pruning(parts);
  for (const PassPart& p : parts) p.cache->add_pending(int64_t(p.chunk.tokens.size()));
  hidden_rows(parts, a);
  output_head(parts, a);
}

std::optional<ReadForecast> Model::read_forecast() const {
  if (!token_routes_kept()) return std::nullopt;
  std::vector<std::vector<uint8_t>> held(size_t(config_.n_layers));
  for (int64_t l = 0; l < config_.n_layers; ++l)
    if (arch_.layers[size_t(l)].ffn != FfnBlock::Dense) {
      held[size_t(l)].resize(size_t(config_.n_experts));
      layers_->held_experts(l, held[size_t(l)]);
    }
  return ReadForecast(*token_routes_, std::move(held));
}

void Model::begin_row_pruning(std::span<const PassPart> parts) {
  pruning_.end();
  if (first_expert_layer_ < 0 || std::none_of(parts.begin(), parts.end(), [](const PassPart& p) { return p.value_ms; }))
    return;
  std::vector<float> value;
  std::vector<int32_t> root_of;
  std::vector<std::vector<int32_t>> below;
  for (const PassPart& p : parts) {
    const int32_t r0 = int32_t(value.size()), n = int32_t(p.chunk.tokens.size());
    // A tree's mask is n rows over its pending rows and its own: row i descends from row
    // j (or is j) where it sees j.
    const int64_t cols = p.chunk.mask.empty() ? 0 : int64_t(p.chunk.mask.size()) / n, pending = cols - n;
    for (int32_t j = 0; j < n; ++j) {
      value.push_back(p.value_ms && j > 0 ? p.value_ms[j] : -1.0f);
      root_of.push_back(r0);
      std::vector<int32_t> rows{r0 + j};
      if (p.value_ms && cols > 0)
        for (int32_t i = j + 1; i < n; ++i)
          if (p.chunk.mask[size_t(i * cols + pending + j)]) rows.push_back(r0 + i);
      below.push_back(std::move(rows));
    }
  }
  pruning_.begin(std::move(value), std::move(root_of), std::move(below));
}

void Model::prune_rows(int64_t l, LayerSource& src) {
  held_.resize(size_t(config_.n_experts));
  src.held_experts(l, held_);
  // An expert read's time at the rate the storage has read so far (none measured yet:
  // nothing is pruned).
  const ReadProgress read = layers_->read_progress();
  const double read_ms = read.bytes > 0 ? double(expert_bytes_[size_t(l)]) * read.busy_ms / double(read.bytes) : 0.0;
  pruning_.prune(routing_, held_, read_ms, expert_layers_after_[size_t(l)]);
}

void Model::end_row_pruning(std::span<const PassPart> parts) {
  if (!pruning_.active()) return;
  int64_t r0 = 0;
  for (const PassPart& p : parts) {
    const int64_t n = int64_t(p.chunk.tokens.size());
    if (p.pruned)
      for (int64_t i = 0; i < n; ++i) p.pruned[i] = pruning_.pruned(r0 + i);
    r0 += n;
  }
  pruning_.end();
}

}  // namespace flashspec
