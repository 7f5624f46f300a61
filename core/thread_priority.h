#pragma once
// Background threads: the draft's threads run beside the target's on the same cores (the
// draft pre-grows its next tree while the target verifies). As SCHED_IDLE threads they
// take only the cycles the target leaves idle -- while it waits for storage -- and yield
// the core at once when a target thread wakes: verification, on the critical path, runs
// at full speed. (nice 19 was not enough: the target's threads meet at a barrier after
// every operation, and a draft thread holding a core for a scheduler slice delayed each
// barrier, so verification slowed as a whole.) Entering SCHED_IDLE needs no
// privilege; leaving it does, so only threads that are background for life call this.
#include <pthread.h>
#include <sched.h>

namespace flashspec {

// Moves the calling thread (only it) to SCHED_IDLE. Best effort: where it is refused,
// the thread keeps its priority.
inline void make_this_thread_background() {
  sched_param p{};
  p.sched_priority = 0;
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &p);
}

}  // namespace flashspec
