#pragma once
// The experts each token id routed to at each layer the last time it was routed there: a
// guess at a pass's experts from its tokens alone, known before the pass computes anything.
//  - The first layer with experts has no layer before it to guess from
//    (Model::guess_experts), so a streamed pass reads that layer's likely experts ahead
//    from this guess as soon as its tokens (the drafts' included) are known.
//  - --tree auto forecasts what each candidate row would read before choosing the rows
//    (model/read_forecast.h).
// `flashspec inspect --routing` measures how often such a guess is right (its `token`
// figure): on the trained fixture routing is mostly the token's, at every layer.
//
// Bounded: at most `max_tokens` token ids are remembered (layers x k experts each); a new
// one replaces the one that came first.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace flashspec {

class TokenRoutes {
 public:
  static constexpr int64_t kMaxTokens = 4096;  // 5.5 MB at 40 layers of 8 experts (max_bytes)
  TokenRoutes(int64_t layers, int64_t k, int64_t max_tokens = kMaxTokens);
  // The most memory a table of `max_tokens` tokens takes (its index's nodes approximated).
  static uint64_t max_bytes(int64_t layers, int64_t k, int64_t max_tokens = kMaxTokens) {
    return uint64_t(max_tokens) * (uint64_t(layers * k) * sizeof(int32_t) + 64);
  }

  // Rows routed at `layer`: `tokens[t]` went to experts[t*k .. t*k+k). Each row is first
  // compared with its token's last routing there (hit_rate), then replaces it.
  void record(int64_t layer, std::span<const int32_t> tokens, std::span<const int32_t> experts);
  // The experts the tokens' last routings at `layer` name, each once, the most named
  // first (ties: the lower id); tokens never routed there add nothing.
  std::vector<int32_t> guess(int64_t layer, std::span<const int32_t> tokens) const;
  // The experts `token` last routed to at `layer` (k), or none.
  std::span<const int32_t> last(int64_t layer, int32_t token) const;
  // Of the rows recorded whose token had routed at that layer before, the share of their
  // experts that last routing named (1 before any such row).
  double hit_rate() const { return compared_ > 0 ? hits_ / compared_ : 1.0; }
  int64_t layers() const { return layers_; }
  int64_t k() const { return k_; }

 private:
  int32_t slot_of(int32_t token);  // the token's slot, made (replacing the oldest) if new
  int64_t layers_, k_, max_tokens_;
  std::unordered_map<int32_t, int32_t> slot_;  // token -> slot
  std::vector<int32_t> token_of_;              // slot -> token
  std::vector<int32_t> experts_;               // slot x layer x k; -1: not routed there yet
  int32_t next_ = 0;                           // once full: the slot to replace next
  double hits_ = 0, compared_ = 0;
};

}  // namespace flashspec
