// tcp_store.h: the rendezvous store over TCP (torch.distributed.TCPStore).
// Rank 0 constructs it with is_server = true and hosts a small poll()-based server thread
// on MASTER_ADDR:MASTER_PORT; every rank (rank 0 included) is a client of that server.
// The protocol is a tiny request/response over length-prefixed strings (tcp_store.cpp);
// the server parks get/wait requests until their keys exist or their deadline passes, so
// no client ever polls and every wait ends in a CommError within the store's timeout.
// Read next: tcp_store.cpp (client and wire format), tcp_store_server.cpp, rendezvous.h.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

class TCPStoreServer;  // tcp_store_server.cpp

class TCPStore : public Store {
 public:
  // is_server: bind host:port and serve (port 0 picks a free port; read it with port()).
  // Throws CommError when the port is in use, or when the server cannot be reached within
  // `timeout` (clients retry connecting until then, since rank 0 may start last).
  TCPStore(std::string host, int port, bool is_server, Seconds timeout = kDefaultTimeout);
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

 private:
  // Sends one request and reads its reply; the reply's status byte decides error or value.
  std::string round_trip(const std::string& request, Seconds reply_within, const char* op,
                         const std::string& what);

  std::string host_;
  int port_ = 0;
  int fd_ = -1;
  std::mutex mu_;  // one request in flight per connection; threads may share a store
  std::unique_ptr<TCPStoreServer> server_;
};

// A port that was free a moment ago on `host` (binds port 0 and reads it back). Launchers use
// it so parallel test runs never collide on 29500. Another process may still take it first;
// the store then reports "port in use" instead of hanging.
int find_free_port(const std::string& host = "127.0.0.1");

namespace detail {
// Wire format shared by client and server. A request is [op:u8][n:u32][n strings], where a
// string is [len:u32][bytes]; integers are sent as decimal strings. A reply is [status:u8]
// [one string]: status 0 = ok (the string is the value), 1 = error (the string says why).
enum class StoreOp : uint8_t { Set = 1, Get = 2, Add = 3, Wait = 4, Check = 5 };
std::string encode_request(StoreOp op, const std::vector<std::string>& args);
void put_u32(std::string& out, uint32_t v);
uint32_t get_u32(const char* p);
}  // namespace detail

}  // namespace dplab::parallel
