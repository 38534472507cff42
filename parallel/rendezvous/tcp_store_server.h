// tcp_store_server.h: the server half of TCPStore, hosted by rank 0 (internal header).
// One thread runs a poll() loop over the listening socket, every client connection and a
// wake-up pipe; it keeps the key-value map and a list of parked get/wait requests that are
// answered when their keys appear or their deadline passes.
// Read next: tcp_store_server.cpp.
#pragma once
#include <atomic>
#include <string>
#include <thread>

namespace dplab::parallel {

class TCPStoreServer {
 public:
  // Binds host:port (0 = any free port) and starts serving. Throws CommError if the port is
  // in use or the address cannot be bound.
  TCPStoreServer(const std::string& host, int port);
  ~TCPStoreServer();  // stops the thread and closes every connection
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }

 private:
  void serve();  // the poll loop (tcp_store_server.cpp)

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dplab::parallel
