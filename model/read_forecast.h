#pragma once
// What the rows of a pass not yet run are expected to route to, and of that to read from
// storage, from each row's token: its last routing at each layer (model/token_routes.h),
// right for the measured share of its experts, and what the expert cache holds there.
// --tree auto prices its candidate rows with it (engine/budget_policy.h), so that a
// draft token whose experts the root's row or the cache already has is cheap, and one
// routing to cold experts is dear.
//
// Per layer, a row is expected to route to the experts its token last named with
// probability h (TokenRoutes::hit_rate) and, for the rest of its k, to experts drawn at
// random; a token never routed is all random. An expert adds to the union unless an
// earlier row of the pass routes to it, and to the reads unless it is also not held.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/token_routes.h"

namespace flashspec {

class ReadForecast {
 public:
  // `held[l]`: per expert of layer l, 1 when in memory or being read; an empty entry: a
  // layer without experts (nothing forecast there).
  ReadForecast(const TokenRoutes& routes, std::vector<std::vector<uint8_t>> held);

  struct Experts {
    double routed = 0, reads = 0;  // summed over layers
  };
  // What a row of `token` would add to the rows added so far.
  Experts added_by(int32_t token) const;
  // Adds a row of `token`; returns what it added.
  Experts add(int32_t token);
  Experts total() const { return total_; }

 private:
  struct Layer {
    std::vector<uint8_t> held, routed;  // per expert: held; named by a row added
    double filled = 0;                  // experts the pass routes to there, expected
    double held_share = 0;              // of all experts, held
  };
  Experts at(size_t l, int32_t token) const;  // what a row of `token` adds at layer l
  const TokenRoutes& routes_;
  std::vector<Layer> layers_;
  Experts total_;
};

}  // namespace flashspec
