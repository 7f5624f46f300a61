#pragma once
// The experts each token id routed to at one layer the last time it was routed there: a
// guess at a pass's experts from its tokens alone, known before the pass computes anything.
// The first layer with experts has no layer before it to guess from (Model::guess_experts),
// so a streamed pass reads that layer's likely experts ahead from this guess as soon as
// its tokens (the drafts' included) are known. `flashspec inspect --routing` measures how
// often such a guess is right (its `token` figure): routing there is mostly the token's.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace flashspec {

class TokenRoutes {
 public:
  explicit TokenRoutes(int64_t k) : k_(k) {}

  // Rows routed: `tokens[t]` went to experts[t*k .. t*k+k). At most one entry per token id
  // of the vocabulary (k ids each), so the table is bounded by the vocabulary.
  void record(std::span<const int32_t> tokens, std::span<const int32_t> experts);
  // The experts the tokens' last routings name, each once, the most named first (ties:
  // the lower id); tokens never routed add nothing.
  std::vector<int32_t> guess(std::span<const int32_t> tokens) const;
  // The experts `token` last routed to (k), or none.
  std::span<const int32_t> last(int32_t token) const;

 private:
  int64_t k_;
  std::unordered_map<int32_t, std::vector<int32_t>> last_;
};

}  // namespace flashspec
