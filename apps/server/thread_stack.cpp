#include "apps/server/thread_stack.h"

#include <pthread.h>

#include <cstring>
#include <string>

#include "core/error.h"

namespace flashspec::server {

void set_thread_stack_size(size_t bytes) {
  pthread_attr_t attr;
  if (int rc = pthread_getattr_default_np(&attr); rc != 0)
    throw Error(std::string("thread stack size: ") + std::strerror(rc));
  int rc = pthread_attr_setstacksize(&attr, bytes);
  if (rc == 0) rc = pthread_setattr_default_np(&attr);
  pthread_attr_destroy(&attr);
  if (rc != 0) throw Error("thread stack size of " + std::to_string(bytes) + " bytes: " + std::strerror(rc));
}

}  // namespace flashspec::server
