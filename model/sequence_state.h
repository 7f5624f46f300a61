#pragma once
// What one sequence carries between passes, for one model, behind one interface. A pass
// appends rows after the committed positions as *pending* rows (a prompt chunk, a token
// tree's nodes); the session then keeps the accepted ones with one commit() and every
// kind of state follows: attention's KV rows (model/kv_cache.h) today, a recurrent
// layer's state per tree node (kept for the end of the accepted path) or a sliding
// window's ring next. The loops that verify trees know only this interface.
#include <cstdint>
#include <span>

namespace flashspec {

class SequenceState {
 public:
  virtual ~SequenceState() = default;
  // Positions accepted so far, and rows computed after them since the last commit.
  virtual int64_t committed() const = 0;
  virtual int64_t pending() const = 0;
  // Before a pass: room for T more pending rows (Error when there is none).
  virtual void prepare_rows(int64_t T) = 0;
  // After a pass: it wrote T pending rows.
  virtual void add_pending(int64_t T) = 0;
  // Keeps pending rows `kept` (indices into the pending rows, increasing: a tree's
  // accepted path) as the next committed positions, in that order, and drops the others;
  // the last `still_pending` of them stay pending instead (a draft tree kept for the next
  // round). A rejected branch leaves nothing behind.
  virtual void commit(std::span<const int64_t> kept, int64_t still_pending = 0) = 0;
  // Keeps the first n pending rows (a causal run), drops the rest.
  virtual void commit_first(int64_t n) = 0;
  // Drops committed positions from n on (a chat turn restarted, a stop inside a pass)
  // and returns the positions kept: n, or fewer where a state cannot go back to n (a
  // recurrent layer's, model/recurrent_state.h), which the caller then computes again.
  virtual int64_t truncate(int64_t n) = 0;
};

}  // namespace flashspec
