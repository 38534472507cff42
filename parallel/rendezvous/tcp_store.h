// tcp_store.h: the rendezvous store over TCP (torch.distributed.TCPStore), for the ranks
// of one job and nobody else.
// Rank 0 constructs it with is_server = true and hosts a small poll()-based server thread
// on MASTER_ADDR:MASTER_PORT; every rank (rank 0 included) is a client of that server.
// Every connection first proves the job token (job_token.h) and checks that the server
// proves it too; then requests and replies are length-prefixed strings (store_wire.h). The
// server parks get/wait requests until their keys exist or their deadline passes, so no
// client ever polls and every wait ends in a CommError within the store's timeout.
// What the store guarantees (who gets in, what it binds, its limits): docs/store.md.
// Read next: tcp_store.cpp (client), tcp_store_server.cpp, rendezvous.h.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/rendezvous/store.h"
#include "parallel/rendezvous/store_wire.h"

namespace dplab::parallel {

class TCPStoreServer;  // tcp_store_server.cpp

class TCPStore : public Store {
 public:
  // is_server: bind host:port (port 0 picks a free port; read it with port()) and serve the
  // connections that prove job_token. Throws CommError when the port is in use, when the
  // server cannot be reached within `timeout` (clients retry connecting until then, since
  // rank 0 may start last), or when the server refuses our token or cannot prove it.
  TCPStore(std::string host, int port, bool is_server, Seconds timeout, std::string job_token,
           StoreLimits limits = {});
  ~TCPStore() override;
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  bool is_server() const { return server_ != nullptr; }
  // A second client connection to the same server with the same token (a watchdog thread
  // uses one so it never queues behind the main thread's request).
  std::shared_ptr<TCPStore> connect_again(Seconds timeout) const;
  // Server only: connections refused so far (wrong token, too slow, too many).
  uint64_t refused_connections() const;

 private:
  // Connects and runs the handshake; returns the fd, or -1 (errno set) when nobody listens
  // yet or the server dropped us before the handshake ended (worth another try).
  int connect_and_prove(std::chrono::steady_clock::time_point deadline);
  // Sends one request and reads its reply; the reply's status byte decides error or value.
  std::string round_trip(const std::string& request, Seconds reply_within, const char* op,
                         const std::string& what);
  void check_key(const std::string& key, const char* op) const;

  std::string host_;
  int port_ = 0;
  int fd_ = -1;
  std::string token_;
  StoreLimits limits_;
  std::mutex mu_;  // one request in flight per connection; threads may share a store
  std::unique_ptr<TCPStoreServer> server_;
};

// A port that was free a moment ago on `host` (binds port 0 and reads it back). Launchers use
// it so parallel test runs never collide on 29500. Another process may still take it first;
// the store then reports "port in use" instead of hanging.
int find_free_port(const std::string& host = "127.0.0.1");

}  // namespace dplab::parallel
