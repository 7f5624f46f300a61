#pragma once
// Background threads: the draft's threads run beside the target's on the same cores (the
// draft pre-grows its next tree while the target verifies). At the lowest priority they
// take only the cycles the target leaves idle -- while it waits for storage -- instead
// of slowing verification, which is on the critical path. Raising a thread's nice value
// needs no privilege; it cannot be lowered again, so only threads that are background
// for life call this.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace flashspec {

// Lowers the calling thread (only it: on Linux a nice value is per thread) to nice 19.
// Best effort: where it is refused, the thread keeps its priority.
inline void make_this_thread_background() {
  (void)setpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)), 19);
}

}  // namespace flashspec
