#pragma once
// What a verification pass of a mixture-of-experts target costs, priced by the bytes its
// experts read rather than by its rows (--tree auto, engine/budget_policy.h).
//
// A pass routes, per layer, to the union of its rows' experts (engine/expert_union.h
// says how that union grows with the rows). Of the experts routed to, the share the
// expert cache does not hold is read from storage, at the rate the storage has been
// reading: that read is the pass's floor. Its compute is a line in the experts routed to
// (the dense part once, each expert's multiply). The pass takes the longer of the two,
// plus what the overlap of reading and computing has been losing on the passes measured
// (a pass routes a layer before it can read that layer's misses). All four parts are
// measured on every pass, including the ones that verify the last token alone, so that
// the price of a tree nobody has tried yet follows from what one-row passes read: no
// single noisy tree pass decides whether speculation pays.
//
// A resident target reads nothing: its passes cost their compute line.
#include <cstdint>

#include "engine/running_fit.h"

namespace flashspec {

// One pass, as measured (pass_pipeline.cpp): its time and time waiting for weights, the
// experts routed to (summed over layers), the expert bytes it read from storage, and the
// storage's busy time per byte that landed meanwhile (0: nothing landed).
struct ExpertPassTimes {
  double target_ms = 0, io_wait_ms = 0;
  int64_t routed = 0, read_bytes = 0;
  double storage_ms_per_byte = 0;
  bool prefill = false;  // a prompt's pass: it reads nearly every expert, unlike decoding
  int64_t reads = 0;      // of the experts routed to, those read from storage (cache misses)
};

class ExpertPassCost {
 public:
  void observe(const ExpertPassTimes& p);
  // A decode pass has been measured: the prices below hold.
  bool ready() const { return read_share_.n > 0; }
  // Expected milliseconds of a pass routing to `routed` experts (summed over layers).
  double pass_ms(double routed) const;
  // Expected expert bytes a pass routing to `routed` experts reads.
  double read_bytes(double routed) const { return routed * read_share_.value; }

  // The same from a forecast of the pass's experts (model/read_forecast.h): `routed`
  // experts, `reads` of them from storage, each forecast scaled by what the forecasts of
  // the passes run so far came to. Before a forecast pass has been measured: pass_ms().
  double forecast_pass_ms(double routed, double reads) const;
  // Milliseconds `routed` more experts, `reads` of them read, add to a pass: their compute
  // (the line's slope) plus the storage's time for the reads, scaled as above.
  double forecast_row_ms(double routed, double reads) const;
  // A pass that was forecast to route to `routed` experts and read `reads`, as measured.
  void observe_forecast(double routed, double reads, const ExpertPassTimes& measured);

 private:
  MovingAverage read_share_;    // expert bytes read per expert routed to: the cache's misses
  MovingAverage ms_per_byte_;   // storage busy time per byte read
  MovingAverage overlap_loss_;  // pass time over the longer of its read and its compute
  LineFit compute_;             // compute ms against experts routed to
  MovingAverage bytes_per_read_;  // expert bytes landed per expert read (wrong guesses' included)
  MovingAverage routed_scale_, reads_scale_;  // measured over forecast
  double read_ms(double reads) const { return reads * bytes_per_read_.value * ms_per_byte_.value; }
  // A pass's time from its compute and its reads: the longer, plus the overlap's loss.
  double pass_of(double compute_ms, double reading_ms) const;
};

}  // namespace flashspec
