#pragma once
// Whether the client of a request has hung up, so that its generation (or its wait in
// the queue) stops instead of running for nobody. cpp-httplib 0.11 (Debian 12) does not
// give handlers their socket, so the socket is found among the process's descriptors by
// the connection's addresses, which httplib does give (local port, remote address and
// port: unique among open TCP connections). The descriptor is borrowed, not owned:
// httplib keeps it open until the handler and its content provider have returned, which
// is as long as this object is used.
#include <httplib.h>

namespace flashspec::server {

class ClientConnection {
 public:
  explicit ClientConnection(const httplib::Request& req);
  // True once the peer has closed the connection (EOF or an error on the socket). Data
  // the client sent after its request (a pipelined request) is not a hang-up. A socket
  // that could not be found is never reported gone.
  bool gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace flashspec::server
