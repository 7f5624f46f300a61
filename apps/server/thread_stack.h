#pragma once
// The stack every server thread gets (connections, the engine, httplib's pools), set once at
// startup before any of them starts. Request work recurses only to checked depths (JSON
// nesting 512: core/json_bounds.h; schemas 128; templates 400; GBNF 256; regex 128), which
// tests/test_server_bounds.cpp drives to the limit on a server started under a small
// RLIMIT_STACK, so the size is stated here instead of inherited from `ulimit -s`
// (glibc's default for new threads), which a user or a service manager may have lowered.
#include <cstddef>

namespace flashspec::server {

inline constexpr size_t kThreadStackBytes = size_t(8) << 20;

// Sets the default stack size of threads created from now on. Error when the system refuses.
void set_thread_stack_size(size_t bytes);

}  // namespace flashspec::server
