// tcp_store_server.cpp: rank 0's store server: one thread, one poll() loop, no busy waits,
// no blocking call on a client's socket.
// A connection goes through two states. Pending: the server sent its hello and waits for
// the client's nonce and proof (64 bytes, read and nothing more); a wrong proof or silence
// past the handshake deadline closes it, with one line on stderr. While max_pending wait,
// a newcomer is closed at once (logged; a rank's client tries again): no pending connection
// is ever closed to make room, since it may be a rank halfway through proving itself. Served: requests are parsed incrementally (store_wire.h);
// each is answered at once, or parked (get/wait on missing keys) until its keys appear or
// its deadline passes. Replies go to the connection's output buffer and out as the socket
// takes them (POLLOUT). poll's timeout is the nearest deadline. ServeLoop below is that loop,
// a method per step.
// What the store holds, and the parked requests, live in store_table.h.
// Cost: O(#connections) per wake-up, O(#parked) per set/add.
// Read next: store_table.h; init.cpp (how ranks rendezvous on top of the store), docs/store.md.
#include "parallel/rendezvous/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <optional>

#include "framework/error.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/store_table.h"

namespace dplab::parallel {

namespace {

using Clock = std::chrono::steady_clock;
using detail::encode_reply;
using detail::Request;
using detail::StoreOp;

std::string peer_name(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
  }
  return fmt::format("{}:{}", host, port);
}

struct Connection {
  int fd = -1;
  std::string peer;
  bool served = false;  // proved the token
  Clock::time_point accepted;
  std::string server_nonce;
  std::string proof_in;  // pending: the client's nonce + proof so far
  detail::RequestParser parser;
  std::string in;                 // served: received bytes not yet parsed
  std::string out;                // reply bytes not yet sent
  bool parked = false;            // a get/wait waits for keys
  bool close_after_send = false;  // a refused request: say why, then close
  Clock::time_point close_by;     // ... by then at the latest, read or not
  Connection(const StoreLimits& limits) : parser(limits) {}
};

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

size_t default_max_clients() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<size_t>(16, lim.rlim_cur / 2);
}

// serve()'s poll loop: its state (the table, the connections, how many are served) and
// its steps, each a method. One round: drop the connections past their deadline, settle
// parked requests, flush and pump every connection and list what poll should watch, poll,
// then accept a newcomer and serve the connections poll woke.
class ServeLoop {
 public:
  ServeLoop(const std::string& token, const StoreLimits& limits, int port,
            std::atomic<uint64_t>& refused)
      : token_(token),
        limits_(limits),
        port_(port),
        refused_(refused),
        table_(limits),
        handshake_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(limits.handshake_seconds))) {}

  void run(int listen_fd, int wake_fd, const std::atomic<bool>& stop) {
    while (!stop) {
      const auto now = Clock::now();
      close_expired(now);
      settle(now);
      const bool accepting = now >= accept_paused_until_;
      std::vector<pollfd> fds{{wake_fd, POLLIN, 0}, {accepting ? listen_fd : -1, POLLIN, 0}};
      // order[i] is the connection of fds[i + 2]; from here to the end of the round a
      // connection in `order` is closed only through its own iterator.
      const std::vector<Conn> order = watch(fds);
      int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(accepting));
      if (rc < 0 && errno != EINTR) break;
      if (stop) break;
      if (rc <= 0) continue;
      if (fds[1].revents & POLLIN) accept_newcomer(listen_fd);
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents != 0) serve_events(order[i - 2], fds[i].revents);
      // Answered parked requests free their connections to go on with buffered input.
      settle(Clock::now());
      for (auto& c : conns_) pump(c);
    }
    for (auto& c : conns_) ::close(c.fd);
  }

 private:
  using Conn = std::list<Connection>::iterator;

  // One line per refusal for the first few, then one per decade, so a flood of strangers
  // cannot flood the job's log either.
  void log_refusal(const Connection& c, const std::string& why) {
    const uint64_t n = ++refused_;
    if (n <= 10 || n == 100 || n == 1000 || n == 10000 || n == 100000) {
      std::string line = fmt::format("dplab store (port {}): refused a connection from {}: {}",
                                     port_, c.peer, why);
      if (n >= 10) line += fmt::format(" ({} refused so far; only some are logged)", n);
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

  Conn close_conn(Conn it) {
    table_.forget(&*it);
    ::close(it->fd);
    if (it->served) --served_;
    return conns_.erase(it);
  }

  static bool flush(Connection& c) {  // false: the connection is gone
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      c.out.erase(0, static_cast<size_t>(n));
    }
    return !c.close_after_send;
  }

  // Serves what a connection has sent, one request at a time, until it waits on a reply.
  void pump(Connection& c) {
    while (!c.in.empty() && !c.parked && c.out.empty() && !c.close_after_send) {
      try {
        size_t used = c.parser.feed(c.in.data(), c.in.size());
        c.in.erase(0, used);
      } catch (const std::exception& e) {
        c.out = encode_reply(false, fmt::format("refused request: {}", e.what()));
        c.close_after_send = true;  // the rest of its bytes cannot be framed
        c.close_by = Clock::now() + std::chrono::seconds(2);
        c.in.clear();
        break;
      }
      if (!c.parser.ready()) break;
      Request r = c.parser.take();
      try {
        std::optional<std::string> answer = table_.handle(&c, r);
        c.parked = !answer;
        if (answer) c.out = std::move(*answer);
      } catch (const std::exception& e) {  // a whole request the store refuses: say why, go on
        c.out = encode_reply(false, e.what());
      }
    }
  }

  // Parked requests answered: their connections get the reply and go on.
  void settle(Clock::time_point now) {
    for (auto& [owner, bytes] : table_.settle(now)) {
      Connection& c = *static_cast<Connection*>(owner);
      c.out += bytes;
      c.parked = false;
    }
  }

  // The handshake's second half: the client's nonce and proof.
  void check_proof(Connection& c) {
    const std::string nonce = c.proof_in.substr(0, kNonceBytes);
    const std::string proof = c.proof_in.substr(kNonceBytes);
    if (!same_proof(proof, token_proof(token_, "client", c.server_nonce, nonce))) {
      log_refusal(c, "it did not prove the job token (DPLAB_JOB_TOKEN differs, or not a rank)");
      c.out = encode_reply(false, "wrong job token: this store serves only the ranks of its job");
      c.close_after_send = true;
      c.close_by = Clock::now() + std::chrono::seconds(2);
      return;
    }
    c.served = true;
    ++served_;
    c.out.assign(1, '\0');
    c.out += token_proof(token_, "server", c.server_nonce, nonce);
  }

  // Pending connections past their deadline go, and so do refused ones that do not read
  // their last reply.
  void close_expired(Clock::time_point now) {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->close_after_send ? now >= it->close_by
                               : !it->served && now - it->accepted >= handshake_) {
        if (!it->close_after_send)
          log_refusal(*it, fmt::format("no proof of the job token within {:.0f} s",
                                       limits_.handshake_seconds));
        it = close_conn(it);
      } else {
        ++it;
      }
    }
  }

  // Flushes and pumps every connection (closing the ones that are gone) and adds what poll
  // should watch on each of the others to fds; returns them in fds' order.
  std::vector<Conn> watch(std::vector<pollfd>& fds) {
    std::vector<Conn> order;
    for (auto it = conns_.begin(); it != conns_.end();) {
      Connection& c = *it;
      if (!c.out.empty() && !flush(c)) {  // gone, or sent its last words
        it = close_conn(it);
        continue;
      }
      // its reply is out: serve the next request it has already sent (a client may send
      // several before reading), or poll would wait for bytes that have come already
      if (c.out.empty()) pump(c);
      if (!c.out.empty() && !flush(c)) {
        it = close_conn(it);
        continue;
      }
      short ev = POLLRDHUP;
      if (!c.out.empty()) ev |= POLLOUT;
      if (c.out.empty() && !c.parked && !c.close_after_send) ev |= POLLIN;
      fds.push_back({c.fd, ev, 0});
      order.push_back(it++);
    }
    return order;
  }

  // Until the nearest deadline: a parked request, a pending handshake, or accepting again.
  int poll_timeout_ms(bool accepting) const {
    auto wake = table_.next_deadline();
    for (const auto& c : conns_) {
      const auto until = c.close_after_send ? c.close_by : c.accepted + handshake_;
      if (!c.served || c.close_after_send) wake = wake ? std::min(*wake, until) : until;
    }
    if (!accepting) wake = wake ? std::min(*wake, accept_paused_until_) : accept_paused_until_;
    if (!wake) return -1;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60000));
  }

  // A newcomer gets the hello and the server's nonce, unless there is no room for it.
  void accept_newcomer(int listen_fd) {
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &alen,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
      accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);  // no busy loop
      return;
    }
    if (fd < 0) return;
    Connection c(limits_);
    c.fd = fd;
    c.peer = peer_name(addr);
    c.accepted = Clock::now();
    c.server_nonce = random_bytes(kNonceBytes);
    c.out = std::string(detail::kHello, detail::kHelloBytes) + c.server_nonce;
    conns_.push_back(std::move(c));
    // Only the newcomer is ever closed here: the others may be in `order`, which run() walks
    // next (closing one of them here left it a dangling iterator: a crash).
    const size_t pending = conns_.size() - served_ - 1;
    if (pending >= limits_.max_pending) {
      log_refusal(conns_.back(), fmt::format("{} connections are still proving the job token; "
                                             "refused this newer one",
                                             pending));
      close_conn(std::prev(conns_.end()));
    } else if (served_ >= limits_.max_clients) {
      // a full house: the newcomer may still prove itself, but gets no room
      log_refusal(conns_.back(), fmt::format("the store already serves {} connections", served_));
      close_conn(std::prev(conns_.end()));
    }
  }

  // What poll saw on one connection: a hang-up, room to send, or bytes to read (a pending
  // connection's proof, or a served one's requests).
  void serve_events(Conn it, short revents) {
    Connection& c = *it;
    if (revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) {
      // the client closed: its rank finished or died (or a stranger gave up)
      if (!c.served && !c.close_after_send)
        log_refusal(c, "it closed the connection before proving the job token");
      close_conn(it);
      return;
    }
    if ((revents & POLLOUT) && !flush(c)) {
      close_conn(it);
      return;
    }
    if (!(revents & POLLIN)) return;
    char buf[65536];
    // A pending connection is read only as far as its proof: nothing it sends after that
    // is looked at before the proof holds.
    const size_t want = c.served ? sizeof(buf) : kNonceBytes + kProofBytes - c.proof_in.size();
    ssize_t n = ::recv(c.fd, buf, want, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      if (!c.served) log_refusal(c, "it closed the connection before proving the job token");
      close_conn(it);
      return;
    }
    if (!c.served) {
      c.proof_in.append(buf, static_cast<size_t>(n));
      if (c.proof_in.size() == kNonceBytes + kProofBytes) check_proof(c);
    } else {
      c.in.append(buf, static_cast<size_t>(n));
      pump(c);
    }
    if (!c.out.empty() && !flush(c)) close_conn(it);
  }

  const std::string& token_;
  const StoreLimits& limits_;
  const int port_;
  std::atomic<uint64_t>& refused_;
  detail::StoreTable table_;
  std::list<Connection> conns_;  // stable addresses: parked requests point at them
  size_t served_ = 0;            // connections that proved the token
  Clock::time_point accept_paused_until_{};
  const Clock::duration handshake_;  // a pending connection's time to prove itself
};

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, int port, std::string token,
                               StoreLimits limits)
    : token_(std::move(token)), limits_(limits) {
  check_job_token(token_, "the store's job token");
  if (limits_.max_clients == 0) limits_.max_clients = default_max_clients();
  DPLAB_CHECK(limits_.max_pending >= 1 && limits_.handshake_seconds > 0 &&
                  limits_.max_value_bytes <= limits_.max_total_bytes,
              "TCPStore server: limits need max_pending >= 1, handshake_seconds > 0 and "
              "max_value_bytes <= max_total_bytes");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints,
                       &res);
  if (rc != 0) {
    throw CommError(
        fmt::format("TCPStore server: cannot resolve '{}': {}", host, gai_strerror(rc)));
  }
  int err = 0;
  for (addrinfo* ai = res; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only skips TIME_WAIT leftovers of a previous run; a live listener on the
    // port still makes bind fail with EADDRINUSE, which is what we want to report.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
    } else {
      err = errno;
      ::close(fd);
    }
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) {
    if (err == EADDRINUSE) {
      throw CommError(fmt::format("port {} on {} is in use; pick another MASTER_PORT", port, host));
    }
    throw CommError(
        fmt::format("TCPStore server: cannot listen on {}:{}: {}", host, port, std::strerror(err)));
  }
  set_nonblocking(listen_fd_);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    DPLAB_FAIL("TCPStore server: pipe2 failed: {}", std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

TCPStoreServer::~TCPStoreServer() {
  stop_ = true;
  char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_pipe_[1], &byte, 1);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void TCPStoreServer::serve() {
  ServeLoop loop(token_, limits_, port_, refused_);
  loop.run(listen_fd_, wake_pipe_[0], stop_);
}

}  // namespace dplab::parallel
