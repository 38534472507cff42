// broker.cpp: the loop of broker.h: poll every rank's sending pipe (unless too much of its
// traffic waits already) and, where a queue is waiting, its receiving pipe; read what is
// there into a per-rank buffer, cut whole frames out of it, queue each for its destination
// with its source in front; write what a pipe takes. Nothing a rank writes is trusted:
// lengths are checked before anything is kept. The state is guarded by one mutex, held
// while the loop handles what poll() found, never while it waits, so report() and
// settled() see whole frames only; inject() wakes poll() through a pipe of its own.
#include "broker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <mutex>

namespace course::broker {
namespace {

struct Frame {
  std::string bytes;  // with its length in front
  int source;         // whose max_queued it counts against (-1: the judge's)
};

struct Rank {
  int in = -1, out = -1;     // from the rank, to the rank
  std::string pending;       // bytes read from the rank, not yet a whole frame
  std::deque<Frame> queue;   // whole frames for the rank
  std::size_t written = 0;   // of queue.front()
  std::int64_t waiting = 0;  // bytes this rank sent that wait in some queue
  bool gone = false;         // its receiving pipe broke: what is queued for it is dropped
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string frame(std::uint8_t source, const char* payload, std::size_t n) {
  const auto length = static_cast<std::uint32_t>(n + 1);
  std::string f(reinterpret_cast<const char*>(&length), 4);
  f.push_back(static_cast<char>(source));
  f.append(payload, n);
  return f;
}

}  // namespace

struct Broker::State {
  Options options;
  mutable std::mutex mu;
  std::vector<Rank> ranks;
  Report report;
  std::int64_t moved = 0;
  int wake[2] = {-1, -1};  // inject() writes a byte; the loop's poll() wakes

  void refuse(int r, const std::string& why) {  // the rank is cut off; nothing more is read
    report.problems.push_back("rank " + std::to_string(r) + " " + why);
    close_fd(ranks[r].in);
    ranks[r].pending.clear();
  }
  void deliver(Rank& k) {
    if (k.gone) {  // nobody reads: what waits for it is dropped
      for (Frame& f : k.queue)
        if (f.source >= 0) ranks[f.source].waiting -= static_cast<std::int64_t>(f.bytes.size());
      k.queue.clear();
      k.written = 0;
      return;
    }
    const Frame& f = k.queue.front();
    const ssize_t w = ::write(k.out, f.bytes.data() + k.written, f.bytes.size() - k.written);
    if (w < 0 && errno != EAGAIN && errno != EINTR) {
      k.gone = true;  // EPIPE: the rank stopped reading
      deliver(k);
    } else if (w > 0 && (moved += w, k.written += w) == f.bytes.size()) {
      if (f.source >= 0) ranks[f.source].waiting -= static_cast<std::int64_t>(f.bytes.size());
      k.queue.pop_front();
      k.written = 0;
    }
  }
  void take(int r, const char* data, std::size_t got) {
    Rank& k = ranks[r];
    const int n = static_cast<int>(ranks.size());
    moved += static_cast<std::int64_t>(got);
    k.pending.append(data, got);
    std::size_t at = 0;  // every whole frame in what was read
    while (k.in >= 0 && k.pending.size() - at >= 4) {
      std::uint32_t length;
      std::memcpy(&length, k.pending.data() + at, 4);
      if (length == 0 || length > options.max_frame) {
        refuse(r, "sent a frame of " + std::to_string(length) + " bytes (1 to " +
                      std::to_string(options.max_frame) + ": a destination and the payload)");
        return;
      }
      if (k.pending.size() - at < 4 + std::size_t{length}) break;
      const int d = static_cast<std::uint8_t>(k.pending[at + 4]);
      if (d >= n || d == r) {
        refuse(r, "sent a frame to rank " + std::to_string(d) + ", and there are " +
                      std::to_string(n) + " ranks" + (d == r ? " (itself)" : ""));
        return;
      }
      report.bytes[r][d] += length - 1;
      report.messages[r][d] += 1;
      Frame f{frame(static_cast<std::uint8_t>(r), k.pending.data() + at + 5, length - 1), r};
      k.waiting += static_cast<std::int64_t>(f.bytes.size());
      ranks[d].queue.push_back(std::move(f));
      if (ranks[d].gone) deliver(ranks[d]);
      at += 4 + std::size_t{length};
    }
    k.pending.erase(0, at);
  }
};

Broker::Broker(const std::vector<Link>& links, Options options) : s_(std::make_unique<State>()) {
  const int n = static_cast<int>(links.size());
  s_->options = options;
  s_->report.bytes.assign(n, std::vector<std::int64_t>(n, 0));
  s_->report.messages.assign(n, std::vector<std::int64_t>(n, 0));
  s_->ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    s_->ranks[r].in = links[r].from_rank;
    s_->ranks[r].out = links[r].to_rank;
    // pipes that hold a few segments (a pipe holds 64 KiB unless asked; 1 MiB is what an
    // unprivileged process may ask for): fewer switches between a rank and the broker
    for (int fd : {s_->ranks[r].in, s_->ranks[r].out})
      if (fd >= 0) ::fcntl(fd, F_SETPIPE_SZ, 1 << 20);
    if (s_->ranks[r].out >= 0)
      ::fcntl(s_->ranks[r].out, F_SETFL, ::fcntl(s_->ranks[r].out, F_GETFL) | O_NONBLOCK);
  }
  if (::pipe2(s_->wake, O_NONBLOCK | O_CLOEXEC) != 0) s_->wake[0] = s_->wake[1] = -1;
}

Broker::~Broker() {
  for (Rank& k : s_->ranks) {
    close_fd(k.in);
    close_fd(k.out);
  }
  close_fd(s_->wake[0]);
  close_fd(s_->wake[1]);
}

void Broker::run() {
  std::signal(SIGPIPE, SIG_IGN);  // a rank that is gone is an EPIPE, never the broker's death
  State& s = *s_;
  const int n = static_cast<int>(s.ranks.size());
  std::vector<char> buf(1 << 20);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // (rank, writing)
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (int r = 0; r < n; ++r) {
        Rank& k = s.ranks[r];
        if (k.in >= 0 && k.waiting <= s.options.max_queued) {
          fds.push_back({k.in, POLLIN, 0});
          who.emplace_back(r, false);
        }
        if (!k.queue.empty() && !k.gone && k.out >= 0) {
          fds.push_back({k.out, POLLOUT, 0});
          who.emplace_back(r, true);
        }
      }
      bool reading = false;
      for (const Rank& k : s.ranks) reading = reading || k.in >= 0;
      if (fds.empty() && !reading) break;  // every rank closed, nothing left for one that reads
    }
    if (s.wake[0] >= 0) fds.push_back({s.wake[0], POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> lock(s.mu);
      s.report.problems.push_back(std::string("the broker's poll failed: ") + std::strerror(errno));
      break;
    }
    std::lock_guard<std::mutex> lock(s.mu);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (i == who.size()) {  // the wake pipe: drain it; the new queue is polled next round
        while (::read(s.wake[0], buf.data(), buf.size()) > 0) {}
        continue;
      }
      auto [r, writing] = who[i];
      Rank& k = s.ranks[r];
      if (writing) {
        if (!k.queue.empty()) s.deliver(k);
        continue;
      }
      const ssize_t got = ::read(k.in, buf.data(), buf.size());
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        if (!k.pending.empty())
          s.refuse(r, "closed its pipe in the middle of a frame (" +
                          std::to_string(k.pending.size()) + " bytes)");
        close_fd(k.in);
        continue;
      }
      s.take(r, buf.data(), static_cast<std::size_t>(got));
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  for (Rank& k : s.ranks) {
    close_fd(k.in);
    close_fd(k.out);
  }
}

Report Broker::report() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->report;
}

bool Broker::settled() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  for (const Rank& k : s_->ranks) {
    int unread = 0;
    if (k.in >= 0 && ::ioctl(k.in, FIONREAD, &unread) == 0 && unread > 0) return false;
    if (!k.pending.empty() || (!k.queue.empty() && !k.gone)) return false;
  }
  return true;
}

std::int64_t Broker::moved() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->moved;
}

bool Broker::all_blocked_sending(int n, std::vector<std::vector<std::int64_t>>& waiting_for) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  waiting_for.assign(n, std::vector<std::int64_t>(s_->ranks.size(), 0));
  for (int r = 0; r < n; ++r)
    if (s_->ranks[r].waiting <= s_->options.max_queued) return false;
  for (std::size_t d = 0; d < s_->ranks.size(); ++d)
    for (const Frame& f : s_->ranks[d].queue)
      if (f.source >= 0 && f.source < n)
        waiting_for[f.source][d] += static_cast<std::int64_t>(f.bytes.size());
  return true;
}

void Broker::inject(int rank, const std::string& payload) {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    Rank& k = s_->ranks.at(rank);
    if (k.gone || k.out < 0) return;
    k.queue.push_back(
        {frame(static_cast<std::uint8_t>(kJudge), payload.data(), payload.size()), -1});
  }
  if (s_->wake[1] >= 0) {
    const char one = 1;
    [[maybe_unused]] const ssize_t w = ::write(s_->wake[1], &one, 1);
  }
}

Report Broker::settled_report() const {
  for (int i = 0; i < 2000 && !settled(); ++i) ::usleep(1000);
  return report();
}

void Broker::tell_failed(int failed, int n) {
  for (int k = 0; k < n; ++k)
    if (k != failed)
      inject(k, "rank " + std::to_string(k) + " failed because rank " + std::to_string(failed) +
                    " failed");
}

Report run(const std::vector<Link>& links, Options options) {
  Broker b(links, options);
  b.run();
  return b.report();
}

}  // namespace course::broker
