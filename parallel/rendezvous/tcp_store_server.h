// tcp_store_server.h: the server half of TCPStore, hosted by rank 0 (internal header).
// One thread runs a poll() loop over the listening socket, every connection and a wake-up
// pipe. It never blocks on a client: sockets are non-blocking, each connection has its own
// output buffer, and a connection is read only while it has no reply waiting and no parked
// get/wait, so one request is in flight per connection and a client that never reads costs
// the server one buffered reply, nothing more. A connection is served only after it proved
// the job token (job_token.h); one that fails or takes too long is closed and logged.
// Read next: tcp_store_server.cpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "parallel/rendezvous/store_wire.h"

namespace dplab::parallel {

class TCPStoreServer {
 public:
  // Binds host:port (0 = any free port) and starts serving connections that prove `token`.
  // Throws CommError if the port is in use or the address cannot be bound.
  TCPStoreServer(const std::string& host, int port, std::string token, StoreLimits limits);
  ~TCPStoreServer();  // stops the thread and closes every connection
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }
  // Connections closed for a wrong or missing proof, a handshake too slow, or a full server.
  uint64_t refused() const { return refused_.load(); }

 private:
  void serve();  // the poll loop (tcp_store_server.cpp)

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::string token_;
  StoreLimits limits_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace dplab::parallel
