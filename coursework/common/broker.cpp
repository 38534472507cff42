// broker.cpp: the loop of broker.h: poll every rank's sending pipe and, where a queue is
// waiting, its receiving pipe; read what is there into a per-rank buffer, cut whole frames
// out of it, queue each for its destination with its source in front; write what a pipe
// takes. Nothing a rank writes is trusted: lengths are checked before anything is kept.
#include "broker.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "wire.h"

namespace course::broker {
namespace {

struct Rank {
  int in = -1, out = -1;          // from the rank, to the rank
  std::string pending;            // bytes read from the rank, not yet a whole frame
  std::deque<std::string> queue;  // whole frames for the rank, with their length in front
  std::size_t written = 0;        // of queue.front()
  bool gone = false;              // its receiving pipe broke: what is queued for it is dropped
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

Report run(const std::vector<Link>& links) {
  std::signal(SIGPIPE, SIG_IGN);  // a rank that is gone is an EPIPE, never the broker's death
  const int n = static_cast<int>(links.size());
  Report report;
  report.bytes.assign(n, std::vector<std::int64_t>(n, 0));
  report.messages.assign(n, std::vector<std::int64_t>(n, 0));
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r) {
    ranks[r].in = links[r].from_rank;
    ranks[r].out = links[r].to_rank;
    if (ranks[r].out >= 0)
      ::fcntl(ranks[r].out, F_SETFL, ::fcntl(ranks[r].out, F_GETFL) | O_NONBLOCK);
  }
  auto refuse = [&](int r, const std::string& why) {  // the rank is cut off; nothing more is read
    report.problems.push_back("rank " + std::to_string(r) + " " + why);
    close_fd(ranks[r].in);
    ranks[r].pending.clear();
  };
  std::vector<char> buf(1 << 16);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // (rank, writing)
    for (int r = 0; r < n; ++r) {
      if (ranks[r].in >= 0) {
        fds.push_back({ranks[r].in, POLLIN, 0});
        who.emplace_back(r, false);
      }
      if (!ranks[r].queue.empty() && !ranks[r].gone && ranks[r].out >= 0) {
        fds.push_back({ranks[r].out, POLLOUT, 0});
        who.emplace_back(r, true);
      }
    }
    if (fds.empty()) break;  // every rank closed, and nothing is left for one that reads
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      report.problems.push_back(std::string("the broker's poll failed: ") + std::strerror(errno));
      break;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto [r, writing] = who[i];
      Rank& k = ranks[r];
      if (writing) {
        const std::string& f = k.queue.front();
        const ssize_t w = ::write(k.out, f.data() + k.written, f.size() - k.written);
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
          k.gone = true;  // EPIPE: the rank stopped reading
        } else if (w > 0 && (k.written += w) == f.size()) {
          k.queue.pop_front();
          k.written = 0;
        }
        continue;
      }
      const ssize_t got = ::read(k.in, buf.data(), buf.size());
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        if (!k.pending.empty()) {
          refuse(r, "closed its pipe in the middle of a frame (" +
                        std::to_string(k.pending.size()) + " bytes)");
        }
        close_fd(k.in);
        continue;
      }
      k.pending.append(buf.data(), got);
      while (k.in >= 0 && k.pending.size() >= 4) {  // every whole frame in what was read
        std::uint32_t length;
        std::memcpy(&length, k.pending.data(), 4);
        if (length == 0 || length > wire::kMaxFrame) {
          refuse(r, "sent a frame of " + std::to_string(length) + " bytes (1 to " +
                        std::to_string(wire::kMaxFrame) + ": a destination and the payload)");
          break;
        }
        if (k.pending.size() < 4 + std::size_t{length}) break;
        const int d = static_cast<std::uint8_t>(k.pending[4]);
        if (d >= n || d == r) {
          refuse(r, "sent a frame to rank " + std::to_string(d) + ", and there are " +
                        std::to_string(n) + " ranks" + (d == r ? " (itself)" : ""));
          break;
        }
        report.bytes[r][d] += length - 1;
        report.messages[r][d] += 1;
        ranks[d].queue.push_back(
            frame(static_cast<std::uint8_t>(r), k.pending.data() + 5, length - 1));
        k.pending.erase(0, 4 + std::size_t{length});
      }
    }
  }
  for (Rank& k : ranks) {
    close_fd(k.in);
    close_fd(k.out);
  }
  return report;
}

}  // namespace course::broker
