// tcp_store.cpp: the TCPStore client (see tcp_store.h; the wire format is store_wire.h).
// A connection starts with the handshake: read the server's hello and nonce, send ours and
// our proof of the token, read the server's proof and check it. Then every operation is one
// request and one reply on the rank's own connection. get and wait carry their timeout to
// the server, which answers "timed out" itself; the client waits a little longer than that,
// so a reply that never comes means the server is gone.
// Read next: tcp_store_server.cpp.
#include "parallel/rendezvous/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "framework/error.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/tcp_store_server.h"

namespace dplab::parallel {

namespace {

using Clock = std::chrono::steady_clock;
// A get/wait reply may take up to the store timeout; allow this much more before deciding
// the server itself is gone.
constexpr Seconds kReplyMargin{5.0};

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Resolves host (IPv4 or IPv6) and connects once; returns the fd or -1 with errno set.
int connect_once(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    throw CommError(
        fmt::format("TCPStore: cannot resolve MASTER_ADDR '{}': {}", host, gai_strerror(rc)));
  }
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    int saved = errno;
    ::close(fd);
    fd = -1;
    errno = saved;
  }
  freeaddrinfo(res);
  return fd;
}

void send_all(int fd, const std::string& data, const std::string& where) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw CommError(fmt::format("TCPStore: lost the connection to the store server {} "
                                  "while sending ({}); did rank 0 exit?",
                                  where, std::strerror(errno)));
    }
    off += static_cast<size_t>(n);
  }
}

// How a read of exactly n bytes ended.
enum class ReadEnd { kDone, kTimedOut, kClosed };

// Reads exactly n bytes before the deadline, across short reads and signals. kClosed: the
// peer closed the connection (errno ECONNRESET) or it failed (errno says how).
ReadEnd read_exact(int fd, char* buf, size_t n, Clock::time_point deadline) {
  size_t off = 0;
  while (off < n) {
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return ReadEnd::kTimedOut;
    ssize_t got = ::recv(fd, buf + off, n - off, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = ECONNRESET;
      return ReadEnd::kClosed;
    }
    off += static_cast<size_t>(got);
  }
  return ReadEnd::kDone;
}

// read_exact for a reply to op(what): throws CommError on timeout or a closed socket.
void recv_exact(int fd, char* buf, size_t n, Clock::time_point deadline, const std::string& where,
                const char* op, const std::string& what) {
  switch (read_exact(fd, buf, n, deadline)) {
    case ReadEnd::kDone: return;
    case ReadEnd::kTimedOut:
      throw CommError(fmt::format("TCPStore: no reply from the store server {} to {}({}) in "
                                  "time; the server is stuck or gone",
                                  where, op, what));
    case ReadEnd::kClosed:
      throw CommError(fmt::format("TCPStore: the store server {} closed the connection during "
                                  "{}({}); rank 0 (which hosts it) exited or crashed",
                                  where, op, what));
  }
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

}  // namespace

int find_free_port(const std::string& host) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  DPLAB_CHECK(fd >= 0, "find_free_port: socket() failed: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;  // the kernel picks a free port
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int saved = errno;
    ::close(fd);
    DPLAB_FAIL("find_free_port: cannot bind {}:0: {}", host, std::strerror(saved));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TCPStore::TCPStore(std::string host, int port, bool is_server, Seconds timeout,
                   std::string job_token, StoreLimits limits)
    : host_(std::move(host)), port_(port), token_(std::move(job_token)), limits_(limits) {
  timeout_ = timeout;
  DPLAB_CHECK(port >= 0 && port <= 65535, "TCPStore: port must be in [0, 65535], got {}", port);
  check_job_token(token_, "the TCPStore's job token");
  if (is_server) {
    server_ = std::make_unique<TCPStoreServer>(host_, port_, token_, limits_);
    port_ = server_->port();
  } else {
    DPLAB_CHECK(port > 0, "TCPStore: a client needs the server's port, got {}", port);
  }
  // Clients retry: rank 0 may not be listening yet. Back off from 10 ms to 200 ms so that
  // many waiting ranks on 2 cores do not spin.
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  auto pause = std::chrono::milliseconds(10);
  int last_errno = 0;
  for (;;) {
    try {
      fd_ = connect_and_prove(deadline);
    } catch (...) {
      server_.reset();
      throw;
    }
    if (fd_ >= 0) break;
    last_errno = errno;
    if (Clock::now() >= deadline) {
      server_.reset();
      throw CommError(fmt::format(
          "TCPStore: could not reach the store server at {}:{} within {:.1f} s (last error: {}); "
          "is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on every rank?",
          host_, port_, timeout.count(), std::strerror(last_errno)));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

int TCPStore::connect_and_prove(Clock::time_point deadline) {
  int fd = connect_once(host_, port_);
  if (fd < 0) return -1;
  const std::string where = fmt::format("at {}:{}", host_, port_);
  // Reads n bytes; false if the server closed the connection first (it may have dropped us
  // to make room for others: worth another try).
  auto read = [&](char* buf, size_t n) {
    const ReadEnd end = read_exact(fd, buf, n, deadline);
    if (end == ReadEnd::kTimedOut) {
      ::close(fd);
      throw CommError(fmt::format("TCPStore: the server {} accepted the connection but did not "
                                  "finish the handshake in time; is it a dplab store?",
                                  where));
    }
    return end == ReadEnd::kDone;
  };
  auto give_up = [&] {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  };
  std::string hello(detail::kHelloBytes + kNonceBytes, '\0');
  if (!read(hello.data(), hello.size())) return give_up();
  if (hello.compare(0, detail::kHelloBytes, detail::kHello) != 0) {
    ::close(fd);
    throw CommError(fmt::format("TCPStore: what listens {} is not a dplab store (it did not open "
                                "with the store's hello); another program holds MASTER_PORT",
                                where));
  }
  const std::string server_nonce = hello.substr(detail::kHelloBytes);
  const std::string nonce = random_bytes(kNonceBytes);
  std::string answer = nonce + token_proof(token_, "client", server_nonce, nonce);
  if (::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL) != ssize_t(answer.size()))
    return give_up();
  char status = 0;
  if (!read(&status, 1)) return give_up();
  if (status != 0) {
    char head[4];
    std::string why = "(no reason given)";
    if (read(head, 4)) {
      why.assign(std::min<uint32_t>(detail::get_u32(head), 1024), '\0');
      if (!read(why.data(), why.size())) why = "(no reason given)";
    }
    ::close(fd);
    throw CommError(fmt::format("TCPStore: the store server {} refused this rank: {}; every rank "
                                "of a job needs the same {}",
                                where, why, kJobTokenVariable));
  }
  std::string proof(kProofBytes, '\0');
  if (!read(proof.data(), proof.size())) return give_up();
  if (!same_proof(proof, token_proof(token_, "server", server_nonce, nonce))) {
    ::close(fd);
    throw CommError(fmt::format("TCPStore: the server {} could not prove the job token: it is "
                                "another job's store, or a stranger holds MASTER_PORT",
                                where));
  }
  int one = 1;  // small requests: send them now, not after Nagle's 40 ms
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

TCPStore::~TCPStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();  // joins the server thread
}

std::shared_ptr<TCPStore> TCPStore::connect_again(Seconds timeout) const {
  return std::make_shared<TCPStore>(host_, port_, false, timeout, token_, limits_);
}

uint64_t TCPStore::refused_connections() const { return server_ ? server_->refused() : 0; }

std::string TCPStore::round_trip(const std::string& request, Seconds reply_within, const char* op,
                                 const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string where = fmt::format("at {}:{}", host_, port_);
  send_all(fd_, request, where);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(reply_within);
  char head[5];
  recv_exact(fd_, head, 5, deadline, where, op, what);
  uint32_t len = detail::get_u32(head + 1);
  // the server proved the token, but a reply still never gets more room than a value can take
  if (len > limits_.max_value_bytes + 4096) {
    throw CommError(fmt::format("TCPStore: a reply of {} from the server {} to {}({}); replies "
                                "are at most {}",
                                detail::human_bytes(len), where, op, what,
                                detail::human_bytes(limits_.max_value_bytes)));
  }
  std::string body(len, '\0');
  if (len > 0) recv_exact(fd_, body.data(), len, deadline, where, op, what);
  if (head[0] != 0) throw CommError(fmt::format("TCPStore {}: {}", where, body));
  return body;
}

void TCPStore::check_key(const std::string& key, const char* op) const {
  DPLAB_CHECK(key.size() <= limits_.max_key_bytes,
              "TCPStore::{}: a key of {} ('{}...'); the "
              "store takes keys up to {}",
              op, detail::human_bytes(key.size()), key.substr(0, 32),
              detail::human_bytes(limits_.max_key_bytes));
}

static std::string timeout_ms_str(Seconds t) {
  return std::to_string(static_cast<int64_t>(std::min(t.count(), 1e9) * 1000.0));
}

void TCPStore::set(const std::string& key, const std::string& value) {
  check_key(key, "set");
  DPLAB_CHECK(value.size() <= limits_.max_value_bytes,
              "TCPStore::set('{}'): a value of {}; the "
              "store takes values up to {} (it holds small facts, not tensors)",
              key, detail::human_bytes(value.size()), detail::human_bytes(limits_.max_value_bytes));
  round_trip(detail::encode_request(detail::StoreOp::Set, {key, value}), timeout_ + kReplyMargin,
             "set", "'" + key + "'");
}

std::string TCPStore::get(const std::string& key) {
  check_key(key, "get");
  return round_trip(detail::encode_request(detail::StoreOp::Get, {timeout_ms_str(timeout_), key}),
                    timeout_ + kReplyMargin, "get", "'" + key + "'");
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  check_key(key, "add");
  std::string v =
      round_trip(detail::encode_request(detail::StoreOp::Add, {key, std::to_string(delta)}),
                 timeout_ + kReplyMargin, "add", "'" + key + "'");
  int64_t out = 0;
  if (!detail::parse_int64(v, out))
    throw CommError(
        fmt::format("TCPStore: add('{}') got '{}' back, not an integer", key, v.substr(0, 64)));
  return out;
}

void TCPStore::wait(const std::vector<std::string>& keys) {
  for (const auto& k : keys) check_key(k, "wait");
  std::vector<std::string> args{timeout_ms_str(timeout_)};
  args.insert(args.end(), keys.begin(), keys.end());
  round_trip(detail::encode_request(detail::StoreOp::Wait, args), timeout_ + kReplyMargin, "wait",
             join_keys(keys));
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) check_key(k, "check");
  return round_trip(detail::encode_request(detail::StoreOp::Check, keys), timeout_ + kReplyMargin,
                    "check", join_keys(keys)) == "1";
}

}  // namespace dplab::parallel
