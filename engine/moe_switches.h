#pragma once
// The parts of a streamed mixture of experts' speculation that a benchmark switches off
// one at a time to measure what each is worth: FLASHSPEC_MOE_OFF=pricing,guess,cache,tokens,prune,shape
// (comma-separated; empty or unset: all on).
//  - pricing: --tree auto prices a pass by the experts' bytes it is expected to read
//    (engine/budget_policy.h), not by the experts it routes to;
//  - guess: the stream reads ahead the guess ranks that are nearly always right even while
//    storage is the bottleneck, not only in its idle time (offload/weight_stream.h);
//  - cache: cache slots move between layers by reuse, not a fixed number per layer
//    (offload/expert_cache.h);
//  - tokens: the first expert layer's experts are read ahead from what the pass's tokens
//    routed to before, as soon as the pass starts (model/token_routes.h);
//  - prune: --tree auto's passes stop verifying the rows whose own expert reads cost more
//    than they are worth (model/row_pruning.h);
//  - shape: --tree auto orders and prices its candidate rows by a forecast of the experts
//    each would read (model/read_forecast.h), not by probability alone under a union model.
#include <string_view>

namespace flashspec {

struct MoeSwitches {
  bool byte_pricing = true;
  bool sure_guesses = true;
  bool shared_cache = true;
  bool token_guess = true;
  bool prune_rows = true;
  bool shape_by_forecast = true;

  // From FLASHSPEC_MOE_OFF; Error naming an unknown part.
  static MoeSwitches from_environment();
  static MoeSwitches parse(std::string_view off);
};

}  // namespace flashspec
