// store_attacker.h: a raw client of a TCP store for the security suite: it speaks the wire
// format by hand (store_wire.h), so it can do what TCPStore never does: skip the handshake,
// prove a wrong token, send lengths it does not follow, never read its replies.
// Read next: test_security.cpp.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/store_wire.h"

namespace dplab::security {

namespace par = dplab::parallel;

// How long a read waits for bytes the test expects to come: a hang guard, not a speed limit
// (every caller expects the reply or the close to come, so only a failure waits this long).
inline constexpr int kReplyGuardMs = 60000;

class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Exactly n bytes within timeout_ms; fewer if the server closed or went quiet.
  std::string recv(size_t n, int timeout_ms = kReplyGuardMs) {
    std::string out;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) break;
      char buf[65536];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  // True when the server closed the connection within timeout_ms (reads and drops bytes).
  bool closed_by_server(int timeout_ms = kReplyGuardMs) {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return false;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, sizeof(buf), 0);
      if (got <= 0) return true;
    }
  }
  // The hello and the server's nonce ("" if they did not come).
  std::string read_hello() {
    std::string h = recv(par::detail::kHelloBytes + par::kNonceBytes);
    return h.size() == par::detail::kHelloBytes + par::kNonceBytes
               ? h.substr(par::detail::kHelloBytes)
               : "";
  }
  // The handshake with `token`; the status byte the server answered (0 ok, 1 refused, -1 none).
  int prove(const std::string& token) {
    const std::string server_nonce = read_hello();
    if (server_nonce.empty()) return -1;
    const std::string nonce(par::kNonceBytes, 'n');
    send(nonce + par::token_proof(token, "client", server_nonce, nonce));
    std::string status = recv(1);
    if (status.empty()) return -1;
    if (status[0] == 0) recv(par::kProofBytes);
    return status[0];
  }
  // One reply: (status, body).
  std::pair<int, std::string> reply(int timeout_ms = kReplyGuardMs) {
    std::string head = recv(5, timeout_ms);
    if (head.size() < 5) return {-1, ""};
    return {head[0], recv(par::detail::get_u32(head.data() + 1), timeout_ms)};
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace dplab::security
