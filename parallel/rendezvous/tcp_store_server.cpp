// tcp_store_server.cpp: rank 0's store server: one thread, one poll() loop, no busy waits.
// Each connection sends one request at a time (tcp_store.cpp's round_trip), so a connection
// is either idle, mid-request, or parked on a get/wait whose keys do not exist yet. After
// every set/add the parked requests are re-checked; poll's timeout is the nearest deadline,
// so an expired wait is answered with an error within a few ms of its timeout.
// Cost: O(#parked) work per set/add; rendezvous has at most world_size parked waits.
// Read next: init.cpp (how ranks rendezvous on top of the store).
#include "parallel/rendezvous/tcp_store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "framework/error.h"
#include "parallel/rendezvous/tcp_store.h"

namespace dplab::parallel {

namespace {

using Clock = std::chrono::steady_clock;
using detail::StoreOp;
constexpr uint32_t kMaxMessage = 256u << 20;  // a store holds small facts, not tensors

struct Request {
  StoreOp op;
  std::vector<std::string> args;
};

// Takes one complete request off the front of `in`, or returns nullopt if more bytes are
// needed. Throws on a malformed request (the connection is then dropped).
std::optional<Request> parse_request(std::string& in) {
  if (in.size() < 5) return std::nullopt;
  Request r{static_cast<StoreOp>(in[0]), {}};
  uint32_t n = detail::get_u32(in.data() + 1);
  size_t pos = 5;
  for (uint32_t i = 0; i < n; ++i) {
    if (in.size() < pos + 4) return std::nullopt;
    uint32_t len = detail::get_u32(in.data() + pos);
    if (len > kMaxMessage) throw std::runtime_error("oversized string");
    if (in.size() < pos + 4 + len) return std::nullopt;
    r.args.emplace_back(in, pos + 4, len);
    pos += 4 + len;
  }
  in.erase(0, pos);
  return r;
}

std::string reply(bool ok, const std::string& body) {
  std::string out(1, ok ? '\0' : '\1');
  detail::put_u32(out, static_cast<uint32_t>(body.size()));
  return out + body;
}

struct Parked {
  int fd;
  StoreOp op;  // Get (answer with the value) or Wait (answer with "")
  std::vector<std::string> keys;
  Clock::time_point deadline;
  double timeout_s;
};

class ServerState {
 public:
  std::map<int, std::string> inbox;  // fd -> bytes received, not yet parsed
  std::vector<Parked> parked;

  // Handles one request; returns the reply, or nullopt if it was parked.
  std::optional<std::string> handle(int fd, Request& r) {
    auto need = [&](size_t n) {
      if (r.args.size() < n) throw std::runtime_error("too few arguments");
    };
    switch (r.op) {
      case StoreOp::Set:
        need(2);
        data_[r.args[0]] = r.args[1];
        return reply(true, "");
      case StoreOp::Add: {
        need(2);
        int64_t cur = 0;
        if (auto it = data_.find(r.args[0]); it != data_.end()) {
          try {
            cur = std::stoll(it->second);
          } catch (const std::exception&) {
            return reply(false, fmt::format("add('{}'): the key holds '{}', not an integer",
                                            r.args[0], it->second));
          }
        }
        cur += std::stoll(r.args[1]);
        data_[r.args[0]] = std::to_string(cur);
        return reply(true, std::to_string(cur));
      }
      case StoreOp::Check:
        return reply(true, all_exist(r.args) ? "1" : "0");
      case StoreOp::Get:
      case StoreOp::Wait: {
        need(r.op == StoreOp::Get ? 2 : 1);
        double timeout_s = std::stod(r.args[0]) / 1000.0;
        std::vector<std::string> keys(r.args.begin() + 1, r.args.end());
        if (all_exist(keys)) return answer(r.op, keys);
        auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
        parked.push_back({fd, r.op, std::move(keys), deadline, timeout_s});
        return std::nullopt;
      }
    }
    throw std::runtime_error("unknown op");
  }

  // Answers parked requests whose keys now exist or whose deadline has passed.
  // Returns (fd, reply) pairs to send.
  std::vector<std::pair<int, std::string>> settle_parked() {
    std::vector<std::pair<int, std::string>> out;
    auto now = Clock::now();
    for (auto it = parked.begin(); it != parked.end();) {
      if (all_exist(it->keys)) {
        out.emplace_back(it->fd, answer(it->op, it->keys));
      } else if (now >= it->deadline) {
        std::string missing;
        for (const auto& k : it->keys)
          if (!data_.count(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
        out.emplace_back(it->fd, reply(false, fmt::format(
            "{} timed out after {:.1f} s; still missing: {}",
            it->op == StoreOp::Get ? "get" : "wait", it->timeout_s, missing)));
      } else {
        ++it;
        continue;
      }
      it = parked.erase(it);
    }
    return out;
  }

  int poll_timeout_ms() const {
    if (parked.empty()) return -1;
    auto first = std::min_element(parked.begin(), parked.end(), [](const Parked& a, const Parked& b) {
      return a.deadline < b.deadline;
    });
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(first->deadline - Clock::now());
    return static_cast<int>(std::max<int64_t>(ms.count() + 1, 0));
  }

  void forget(int fd) {
    inbox.erase(fd);
    std::erase_if(parked, [fd](const Parked& p) { return p.fd == fd; });
  }

 private:
  bool all_exist(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) > 0; });
  }
  std::string answer(StoreOp op, const std::vector<std::string>& keys) const {
    return reply(true, op == StoreOp::Get ? data_.at(keys.front()) : "");
  }

  std::map<std::string, std::string> data_;
};

bool send_reply(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    throw CommError(fmt::format("TCPStore server: cannot resolve '{}': {}", host, gai_strerror(rc)));
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
    throw CommError(fmt::format("TCPStore server: cannot listen on {}:{}: {}", host, port,
                                std::strerror(err)));
  }
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
  ServerState state;
  std::vector<int> clients;
  auto drop = [&](int fd) {
    ::close(fd);
    state.forget(fd);
    std::erase(clients, fd);
  };
  while (!stop_) {
    std::vector<pollfd> fds{{wake_pipe_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (int c : clients) fds.push_back({c, POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), state.poll_timeout_ms());
    if (rc < 0 && errno != EINTR) break;
    if (stop_) break;
    if (rc > 0 && (fds[1].revents & POLLIN)) {
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) clients.push_back(c);
    }
    std::vector<std::pair<int, std::string>> out;
    for (size_t i = 2; rc > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      int fd = fds[i].fd;
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        drop(fd);  // the client closed: its rank finished or died
        continue;
      }
      std::string& in = state.inbox[fd];
      in.append(buf, static_cast<size_t>(n));
      try {
        while (auto req = parse_request(in)) {
          if (auto r = state.handle(fd, *req)) out.emplace_back(fd, std::move(*r));
        }
      } catch (const std::exception& e) {
        // A malformed request: tell the client why, then drop it (nothing else is safe).
        send_reply(fd, reply(false, fmt::format("malformed request: {}", e.what())));
        drop(fd);
      }
    }
    for (auto& r : state.settle_parked()) out.push_back(std::move(r));
    for (auto& [fd, bytes] : out) {
      if (std::find(clients.begin(), clients.end(), fd) == clients.end()) continue;
      if (!send_reply(fd, bytes)) drop(fd);
    }
  }
  for (int c : clients) ::close(c);
}

}  // namespace dplab::parallel
