#pragma once
// The model of every family flashspec reads (llama, Mixtral-style MoE llamas, qwen2, qwen3,
// qwen3moe, qwen35, qwen35moe, gemma3, gpt-oss: the README's table), its file, config and
// weights, and the one forward pass that serves prefill, plain decoding and token-tree
// verification alike; the families differ in the layer blocks they are built from.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "model/sequence_cache.h"
#include "core/model_config.h"
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "offload/aligned_buffer.h"
#include "model/activations.h"
#include "model/layer_blocks.h"
#include "model/layer_source.h"
#include "model/model_weights.h"
#include "model/moe_routing.h"
#include "model/mtp_weights.h"
#include "model/placed_weights.h"
#include "model/read_forecast.h"
#include "model/ple_rows.h"
#include "model/row_pruning.h"
#include "model/token_routes.h"

namespace flashspec {

// T tokens at explicit positions. A token tree gives a mask, T x (P + T) over the P rows
// already pending in the cache (from earlier passes of the same round) and the batch
// itself: row i may see row j iff mask[i*(P+T) + j]. Without a mask the batch is causal:
// row i sees every pending row and the batch rows up to itself. Every query also sees
// all committed rows.
struct ForwardBatch {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const uint8_t> mask;  // empty: causal
};

// Positions start, start + 1, ... of a causal run of n tokens.
std::vector<int32_t> consecutive_positions(int64_t start, int64_t n);

enum class LogitRows { None, Last, All };

// One sequence's part of a multi-sequence pass (forward_many): its batch, its own state
// (KV rows and whatever else its layers keep), and whose logits it wants, written to
// `logits` (n_vocab per row).
struct SequenceBatch {
  ForwardBatch batch;
  SequenceCache* cache;
  LogitRows rows;
  std::vector<float>* logits;
  // Where wanted (an MTP drafter reads them): every row's hidden state after the final
  // norm, what the head reads, dim floats per row.
  std::vector<float>* hidden = nullptr;
  // A tree's verification over streamed experts (model/row_pruning.h): what verifying
  // each row is worth, in milliseconds (negative: never pruned); `pruned` is then set to
  // one flag per row, 1 for the rows the pass stopped verifying (their logits are
  // garbage). Ignored, with nothing pruned, where the batch takes more than one pass.
  std::span<const float> row_value_ms = {};
  std::vector<uint8_t>* pruned = nullptr;
};

// Rows of a model's multi-token-prediction layer: row i reads token tokens[i] at
// positions[i] with hidden[i] (dim floats, host memory): the target's hidden row (after
// its final norm) at the position before, or the MTP layer's own output row there when it
// drafts on from its own guess.
struct MtpBatch {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const float> hidden;
  std::span<const uint8_t> mask;  // over the pending rows and the batch, as ForwardBatch's; empty: causal
};

class Model {
 public:
  // Loads the file and places the weights where `backend` computes: views of the mapping
  // for the CPU; for a GPU, the embedding, head and norms, the layers coming from the
  // layer source its placement sets (target/staged_layers.h) before the first forward.
  Model(const std::string& path, Backend& backend);
  // The same over a file already opened or parsed (an image built in memory must outlive
  // the model).
  Model(GgufFile file, Backend& backend);

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  const ModelWeights& weights() const { return weights_; }
  const PlacedWeights& placed() const { return placed_; }
  Backend& backend() { return backend_; }
  // Replaces where layer weights come from (e.g. a streaming source). It must hand out
  // weights in the backend's memory (target/staged_layers.h does for a GPU).
  void set_layer_source(std::unique_ptr<LayerSource> s) { layers_ = std::move(s); }
  // Host-memory backends: copies the output head out of the file mapping into the
  // process's own huge-page memory, where decode reads it faster (the layers:
  // target/loaded_layers.h). Returns the bytes copied.
  // Gemma 4 E2B / E4B: the per-layer embedding table's rows read from storage (io_uring,
  // a small cache) instead of the mapping, so that the table is never resident (a
  // streamed target). The reader, or null for a model without the table.
  const PleRows* read_per_layer_inputs_from_storage(const IoOptions& io);
  const PleRows* per_layer_rows() const { return ple_rows_.get(); }
  uint64_t load_head_into_memory();

  // The element types of the keys and values of the caches make_cache() makes (fp16
  // unless set).
  void set_kv_types(KvType key, KvType value) {
    key_type_ = key;
    value_type_ = value;
  }
  KvType key_type() const { return key_type_; }
  KvType value_type() const { return value_type_; }
  // What one sequence of at most `capacity` positions keeps between passes: KV rows of
  // the attention layers (a model with windowed and global layers: the windowed layers'
  // in a ring of the window and one pass's rows), the recurrent layers' state.
  SequenceCache make_cache(int64_t capacity) const;
  // The same around KV rows of its own (a paged pool's), every attention layer's.
  SequenceCache make_cache(KvCache kv) const;

  // Most tokens one pass computes: a longer batch runs as consecutive passes (the later
  // ones seeing the earlier ones' rows as pending), so activation memory is bounded by it
  // whatever the prompt or tree size.
  void set_max_batch(int64_t n) { max_batch_ = n; }
  static constexpr int64_t kDefaultMaxBatch = 512;  // -b's default
  // The most rows a token tree keeps pending at once: a sliding window's ring keeps room
  // for them beside the window (a causal run attends to it in steps of that many rows).
  void set_max_tree_rows(int64_t n) { max_tree_rows_ = n; }
  int64_t ring_slack() const { return std::max(kRingStepRows, max_tree_rows_); }
  static constexpr int64_t kRingStepRows = 64;

  // Runs the batch: appends its K/V rows to the cache as pending rows, and returns
  // logits (n_vocab per row) of none, the last or every row.
  void forward(const ForwardBatch& batch, SequenceCache& cache, LogitRows rows, std::vector<float>& logits);
  // Several sequences' batches at once: each weight is read once per pass for all their
  // rows, while each row attends only to its own sequence's cache and its own batch rows
  // exactly as forward() would. A row's logits are bit-identical alone or beside others
  // (every kernel computes a row the same way whatever the rows around it). Sequences
  // past max_batch rows continue in the next passes.
  void forward_many(std::span<const SequenceBatch> seqs);
  // A causal run of `tokens` after the cache's committed and pending rows.
  void forward_causal(std::span<const int32_t> tokens, SequenceCache& cache, LogitRows rows,
                      std::vector<float>& logits);

  // Milliseconds forward passes have waited for streamed weights so far.
  double weight_wait_ms() const { return layers_ ? layers_->wait_ms() : 0.0; }
  // (Gemma 4's per-layer embedding rows read from storage count among the bytes.)
  ReadProgress read_progress() const {
    ReadProgress p = layers_ ? layers_->read_progress() : ReadProgress{};
    if (ple_rows_) p.bytes += ple_rows_->bytes_read();
    return p;
  }
  // Mixture-of-experts models: the experts passes have routed to and read so far.
  ExpertCounters expert_counters() const;
  // A forecast of the experts a pass's rows will route to and read, from their tokens'
  // past routing and what the expert cache holds now (model/read_forecast.h); none where
  // experts are not streamed.
  std::optional<ReadForecast> read_forecast() const;
  // Mixture-of-experts models: tells `o` each pass's routing and guesses (null: nobody,
  // the default). A resident model on a host-memory backend guesses for it even where
  // nothing is read ahead; `o` must outlive the passes it watches.
  void set_routing_observer(RoutingObserver* o) { routing_observer_ = o; }
  // Streamed experts: read the first expert layer's likely experts ahead from what the
  // pass's tokens routed to before (model/token_routes.h); on by default, off for a
  // benchmark measuring what it is worth.
  void set_token_guess(bool on) { token_guess_ = on; }

  // ---- the multi-token-prediction layer, where the file has one (mtp_forward.cpp) ----
  bool has_mtp() const { return weights_.has_mtp(); }
  // Places the MTP layer resident for drafting (model/mtp_weights.h), its experts left in
  // the file mapping where `experts_mapped`; returns the bytes it took. Error where the
  // file has none.
  uint64_t place_mtp(bool experts_mapped = false);
  // One sequence's MTP state: its KV rows (the layer attends over the positions it has
  // seen), committed and rolled back as any SequenceCache.
  SequenceCache make_mtp_cache(int64_t capacity) const;
  // Runs the MTP layer over the rows (their K/V appended to `cache` as pending rows, as
  // forward() does): logits (n_vocab per row) of the last or every row, each predicting
  // the token after the next, and those rows' outputs after the shared head norm (dim per
  // row), the hidden rows of a further application.
  void forward_mtp(const MtpBatch& b, SequenceCache& cache, LogitRows rows, std::vector<float>& logits,
                   std::vector<float>& out);

 private:
  // One sequence's rows of one pass: a chunk of its batch (the mask's columns are its
  // pending rows and the chunk's), its cache, and its rows [logit_from, size) whose
  // logits land at `out` (none when out is null).
  struct PassPart {
    ForwardBatch chunk;
    SequenceCache* cache;
    int64_t logit_from;
    float* out;
    float* hidden = nullptr;  // the chunk's normed hidden rows (host memory), where wanted
    const float* value_ms = nullptr;  // the chunk is a whole tree whose rows may be pruned
    uint8_t* pruned = nullptr;
  };
  // Rows of all the parts: the pass's T.
  static int64_t rows_of(std::span<const PassPart> parts) {
    int64_t T = 0;
    for (const PassPart& p : parts) T += int64_t(p.chunk.tokens.size());
    return T;
  }
  struct BatchInputs {
    const int32_t* tokens;     // every part's, in order
    const int32_t* positions;
    std::vector<const uint8_t*> masks;  // each part's, or null: causal
  };
  // The parts' ids, positions and masks where the kernels read them (staged through one
  // upload for a GPU backend).
  BatchInputs place_inputs(std::span<const PassPart> parts);
  // One pass of at most max_batch_ rows over the parts: the embedding, then each layer's
  // blocks as architecture_of() describes them, then the output head.
  void forward_pass(std::span<const PassPart> parts);

  // ---- blocks (forward_blocks.cpp): each reads the residual a.x and adds to it ----
  // Attention: the rows' keys and values go to their own sequence's cache, and each row
  // attends to its own sequence only (all sequences in one attention op).
  void attention_block(int64_t l, const LayerWeights& w, std::span<const PassPart> parts, const BatchInputs& in,
                       const Activations& a);
  // Its cache side: each part's keys and values (a.k, a.v) stored where its cache keeps
  // their positions, and its rows' attention over that cache into a.att.
  void attend_parts(int64_t l, const LayerWeights& w, std::span<const PassPart> parts, const BatchInputs& in,
                    const Activations& a);
  // Gated DeltaNet: each part's rows continue their own sequence's recurrent state along
  // their own paths (model/recurrent_state.h, kernels/delta_net.h).
  void delta_net_block(int64_t l, const LayerWeights& w, std::span<const PassPart> parts, const Activations& a);
  // The parts' recurrent rows: each row's parent, told to their states before the layers.
  void begin_recurrent_rows(std::span<const PassPart> parts);
  void dense_ffn_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a);
  // Its FFN alone: xb's rows through gate, up and down into `out`.
  void dense_ffn(int64_t l, const LayerWeights& w, int64_t T, const Activations& a, float* out);
  // A shared expert beside the routed ones: xb's rows through it into `shared`, scaled
  // by the sigmoid of its gate.
  void shared_expert(const LayerWeights& w, int64_t T, const Activations& a);
  // Routes each row to its experts (decided on the host), runs each routed expert over
  // its rows in the order their weights arrive, and sums their outputs by the weights.
  // `src` hands out the experts' slices (the model's layer source, or the resident MTP layer).
  void experts_ffn_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a, LayerSource& src);
  // Gemma 4's MoE layers: a dense FFN and routed experts side by side.
  void dense_and_experts_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a, LayerSource& src);
  // The experts FFN's halves: the router over `in` (routing_, batches_; the source told
  // what to read, the next layer's guessed), then xb's rows through their experts, summed
  // by their weights into xb.
  void route_experts(int64_t l, const LayerWeights& w, const float* in, int64_t T, const Activations& a,
                     LayerSource& src);
  void run_experts(int64_t l, const LayerWeights& w, int64_t T, const Activations& a, LayerSource& src);
  // Gemma 4's per-layer inputs (ple_forward.cpp): the pass's, from the table rows of its
  // tokens and the embedding (before the layers), and layer l's added to the residual.
  void per_layer_inputs(const Activations& a, int64_t T);
  void per_layer_input_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a);
  // Streaming experts: guesses the experts `layer` will route to from the rows `in` of the
  // layer before it, for the source to read ahead (`logits`: T x experts of scratch).
  void guess_experts(int64_t layer, const float* in, int64_t T, float* logits);
  // The layer's routing of the pass's rows into token_routes_ (rows pruned before it left out).
  void record_token_routes(int64_t l);
  // The final norm and the head over the rows that want logits, written where each part
  // wants them; Error on a logit that is not finite.
  void output_head(std::span<const PassPart> parts, const Activations& a);
  // The parts that want them: their rows after the final norm, copied to the host.
  void hidden_rows(std::span<const PassPart> parts, const Activations& a);
  // One MTP pass of at most max_batch_ rows (forward_mtp's chunks); logits and outputs of
  // rows [first, T) land at `logits` and `out`.
  void mtp_pass(const MtpBatch& b, SequenceCache& cache, int64_t first, float* logits, float* out);
  // The MTP layer's input: eh_proj over each row's normed embedding and normed hidden row.
  void mtp_input(const MtpBatch& b, const int32_t* tokens, const Activations& a);
  void check_finite(const PassPart& p) const;
  // Row pruning over the parts that allow it (PassPart::value_ms): begun before the
  // layers, applied to the routing of each main expert layer, told back after the pass.
  void begin_row_pruning(std::span<const PassPart> parts);
  void prune_rows(int64_t l, LayerSource& src);
  void end_row_pruning(std::span<const PassPart> parts);

  GgufFile file_;
  ModelConfig config_;
  Architecture arch_;  // the blocks of each layer
  ModelWeights weights_;
  Backend& backend_;
  PlacedWeights placed_;
  std::unique_ptr<LayerSource> layers_;
  AlignedBuffer output_copy_;  // the output head, after load_head_into_memory()
  KvType key_type_ = KvType::F16, value_type_ = KvType::F16;
  int64_t max_batch_ = kDefaultMaxBatch;
  int64_t max_tree_rows_ = 0;
  std::vector<std::vector<uint8_t>> chunk_masks_;  // per part: the rows of its tree mask one pass reads
  std::vector<int32_t> pass_tokens_, pass_positions_;  // the parts' ids and positions, concatenated
  std::vector<float> pass_logits_;  // several parts' logits before they are handed out
  std::vector<AttentionArgs> attention_calls_;  // a layer's, one per part
  std::vector<DeltaNetCall> delta_calls_;       // a recurrent layer's, one per part
  // Scratch in backend memory, grown as needed and kept between calls: activations,
  // staged inputs (and their host staging), and for a GPU the logits before download.
  BackendBuffer act_, inputs_, logits_dev_;
  std::vector<uint8_t> inputs_host_;
  // Mixture of experts: routing state of the layer being computed (host), one expert's
  // bytes per layer, and what the passes so far routed.
  std::vector<float> router_host_;
  Routing routing_;
  ExpertBatches batches_;
  std::vector<int64_t> expert_bytes_;
  ExpertCounters expert_counters_;
  RoutingObserver* routing_observer_ = nullptr;
  // The first layer with experts (-1: none) and, when experts are read ahead, what each
  // token routed to at each layer.
  int64_t first_expert_layer_ = -1;
  bool token_guess_ = true;
  std::optional<TokenRoutes> token_routes_;
  std::vector<int64_t> expert_layers_after_;  // per layer: the expert layers after it
  RowPruning pruning_;
  std::vector<uint8_t> held_;  // scratch: per expert of a layer, in memory or being read
  bool token_routes_kept() const {
    return token_routes_ && layers_ && layers_->reads_ahead(first_expert_layer_);
  }
  // The MTP layer once placed, and its scratch: the embedding and hidden halves of its
  // input (backend memory) and the order that interleaves them.
  std::unique_ptr<PlacedMtp> mtp_;
  // Gemma 4's per-layer inputs: where the table's rows come from, a pass's rows on the
  // host, and the order that groups them by layer.
  std::unique_ptr<PleRows> ple_rows_;
  std::vector<float> ple_host_;
  std::vector<int32_t> ple_order_;
  BackendBuffer mtp_in_;
  std::vector<int32_t> mtp_order_;
};

}  // namespace flashspec
