// test_broker.cpp: the broker between ranks (common/broker.h), alone, with ranks as real
// forked processes (or threads, where the broker runs beside them, as in hw3's judge) whose
// only link is the broker: a ring where every rank writes a whole MiB before it reads (a
// broker that blocked on one pipe would stall), each byte arrives from the rank that sent it
// and is counted once; ranks that lie (a rank that does not exist, a frame past the cap, a
// frame cut short) are named while the others finish; ranks that only send are held back
// and the standstill is seen; the judge's notices arrive; a finished ring leaves nothing;
// and a rank's side (broker_transport.h) takes segments by peer and ends a wait in time.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "broker.h"
#include "broker_transport.h"

namespace broker = course::broker;

namespace {

bool write_all(int fd, const std::string& s) {
  for (std::size_t at = 0; at < s.size();) {
    const ssize_t w = ::write(fd, s.data() + at, s.size() - at);
    if (w <= 0) return false;
    at += w;
  }
  return true;
}

bool read_all(int fd, char* p, std::size_t n) {
  for (std::size_t at = 0; at < n;) {
    const ssize_t r = ::read(fd, p + at, n - at);
    if (r <= 0) return false;
    at += r;
  }
  return true;
}

std::string to(int destination, const std::string& payload) {
  const auto length = static_cast<std::uint32_t>(payload.size() + 1);
  return std::string(reinterpret_cast<const char*>(&length), 4) + static_cast<char>(destination) +
         payload;
}

// Two pipes per rank: the broker's ends in links, the rank's in send and receive.
void make_pipes(int n, std::vector<broker::Link>& links, std::vector<int>& send,
                std::vector<int>& receive) {
  for (int r = 0; r < n; ++r) {
    int up[2], down[2];
    REQUIRE(::pipe(up) == 0);
    REQUIRE(::pipe(down) == 0);
    links.push_back({up[0], down[1]});
    send.push_back(up[1]);
    receive.push_back(down[0]);
  }
}

// Runs n ranks, each body(rank, send fd, receive fd) in a process of its own (its exit
// status: 0 when it saw what it expected), and the broker here; returns the broker's
// report and every rank's status.
broker::Report run_ranks(int n, const std::function<int(int, int, int)>& body,
                         std::vector<int>& status) {
  std::vector<broker::Link> links;
  std::vector<int> rank_send, rank_receive;
  make_pipes(n, links, rank_send, rank_receive);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the rank: its own two ends, nothing else
      for (int k = 0; k < n; ++k) {
        ::close(links[k].from_rank);
        ::close(links[k].to_rank);
        if (k != r) {
          ::close(rank_send[k]);
          ::close(rank_receive[k]);
        }
      }
      ::_exit(body(r, rank_send[r], rank_receive[r]));
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < n; ++r) {
    ::close(rank_send[r]);
    ::close(rank_receive[r]);
  }
  broker::Report report = broker::run(links);
  status.clear();
  for (pid_t pid : pids) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    status.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  return report;
}

}  // namespace

TEST_CASE("a ring through the broker: each rank writes a whole MiB before it reads") {
  const int n = 4;
  const std::size_t piece = 1000, pieces = 1050;  // about 1 MiB a rank, in 1000-byte frames
  std::vector<int> status;
  broker::Report report = run_ranks(
      n,
      [&](int r, int send, int receive) {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    for (std::size_t i = 0; i < pieces; ++i)
      if (!write_all(send, to(right, std::string(piece, static_cast<char>('a' + r))))) return 1;
    ::close(send);
    for (std::size_t i = 0; i < pieces; ++i) {
      std::uint32_t length = 0;
      std::string got(piece + 1, '\0');
      if (!read_all(receive, reinterpret_cast<char*>(&length), 4) || length != piece + 1) return 2;
      if (!read_all(receive, got.data(), got.size())) return 3;
      if (got[0] != static_cast<char>(left) ||
          got.substr(1) != std::string(piece, static_cast<char>('a' + left)))
        return 4;
    }
    return 0;
      },
      status);
  CHECK(report.problems.empty());
  CHECK(status == std::vector<int>(n, 0));
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d) {
      CHECK(report.bytes[s][d] ==
            (d == (s + 1) % n ? static_cast<std::int64_t>(piece * pieces) : 0));
      CHECK(report.messages[s][d] == (d == (s + 1) % n ? static_cast<std::int64_t>(pieces) : 0));
    }
}

TEST_CASE("ranks that lie are named, and the others finish") {
  const int n = 4;
  std::vector<int> status;
  broker::Report report = run_ranks(
      n,
      [&](int r, int send, int receive) {
    std::string bytes;
    if (r == 0) bytes = to(3, "hello");                            // honest
    if (r == 1) bytes = to(9, "nobody");                           // no rank 9
    if (r == 2) bytes = std::string("\xff\xff\xff\x7f", 4) + "x";  // 2 GiB claimed
    if (r == 3) bytes = to(0, "cut short").substr(0, 7);           // closes mid-frame
    write_all(send, bytes);
    ::close(send);
    if (r == 3) {  // rank 0's frame still arrives
      char got[4 + 1 + 5];
      return read_all(receive, got, sizeof got) && got[4] == 0 &&
                     std::memcmp(got + 5, "hello", 5) == 0
                 ? 0
                 : 1;
    }
    return 0;
      },
      status);
  CHECK(status == std::vector<int>(n, 0));
  REQUIRE(report.problems.size() == 3);
  std::string all;
  for (const auto& p : report.problems) all += p + "\n";
  CHECK(all.find("rank 1 sent a frame to rank 9, and there are 4 ranks") != std::string::npos);
  CHECK(all.find("rank 2 sent a frame of 2147483647 bytes") != std::string::npos);
  CHECK(all.find("rank 3 closed its pipe in the middle of a frame (7 bytes)") != std::string::npos);
  CHECK(report.bytes[0][3] == 5);
  CHECK(report.bytes[1][0] + report.bytes[1][2] + report.bytes[1][3] == 0);
}

TEST_CASE("two ranks that only send are held back, and the broker says so; a notice of the judge's "
          "arrives") {
  // each rank writes 3000 frames of 1000 bytes to the other and reads nothing: once the pipe
  // to the other (1 MiB, broker.cpp) is full and about 4 more wait, the broker stops reading
  // both, and nothing moves
  const int n = 2;
  std::vector<broker::Link> links;
  std::vector<int> send, receive;
  make_pipes(n, links, send, receive);
  broker::Broker b(links, {.max_frame = 2000, .max_queued = 4 * 1005});
  std::thread loop([&] { b.run(); });
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      for (int i = 0; i < 3000; ++i)
        if (!write_all(send[r], to(1 - r, std::string(1000, 'x')))) break;
    });
  // held back while the pipes still fill; then a standstill: held back, and nothing moves
  std::vector<std::vector<std::int64_t>> waiting;
  bool still = false;
  for (int i = 0; i < 500 && !still; ++i) {  // a guard: it comes within milliseconds
    const std::int64_t moved = b.moved();
    ::usleep(20000);
    still = b.all_blocked_sending(n, waiting) && b.moved() == moved;
  }
  REQUIRE(still);
  CHECK_FALSE(b.settled());
  CHECK(waiting[0][1] > 4 * 1005);
  CHECK(waiting[1][0] > 4 * 1005);
  CHECK(waiting[0][0] == 0);
  // the judge's notice goes behind what waits for rank 0; rank 0 reads until it comes
  b.inject(0, "rank 0 failed because rank 1 failed");
  std::string notice;
  for (int i = 0; i < 4000 && notice.empty(); ++i) {
    std::uint32_t length = 0;
    REQUIRE(read_all(receive[0], reinterpret_cast<char*>(&length), 4));
    std::string frame(length, '\0');
    REQUIRE(read_all(receive[0], frame.data(), length));
    if (static_cast<std::uint8_t>(frame[0]) == broker::kJudge) notice = frame.substr(1);
  }
  CHECK(notice == "rank 0 failed because rank 1 failed");
  for (int r = 0; r < n; ++r)
    ::close(receive[r]);  // the ranks' writes end in EPIPE, the broker's too
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) ::close(send[r]);
  loop.join();
}

TEST_CASE("after a ring through a running broker nothing is on its way, and counts are whole") {
  const int n = 3;
  std::vector<broker::Link> links;
  std::vector<int> send, receive;
  make_pipes(n, links, send, receive);
  broker::Broker b(links);
  std::thread loop([&] { b.run(); });
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {  // one frame to the right, one from the left
      write_all(send[r], to((r + 1) % n, std::string(777, 'y')));
      char got[4 + 1 + 777];
      read_all(receive[r], got, sizeof got);
    });
  for (auto& t : ranks) t.join();
  for (int i = 0; i < 1000 && !b.settled(); ++i) ::usleep(1000);
  CHECK(b.settled());
  const broker::Report report = b.report();
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d) CHECK(report.bytes[s][d] == (d == (s + 1) % n ? 777 : 0));
  for (int r = 0; r < n; ++r) ::close(send[r]);
  loop.join();
  for (int r = 0; r < n; ++r) ::close(receive[r]);
}

TEST_CASE(
    "a rank's transport over the broker: segments by peer, the judge's notice, a wait that ends") {
  const int n = 3;
  std::vector<broker::Link> links;
  std::vector<int> send, receive;  // the ranks' ends of their pipes (a transport does not own them)
  make_pipes(n, links, send, receive);
  std::vector<std::unique_ptr<broker::BrokerTransport>> tr;
  for (int r = 0; r < n; ++r) {
    tr.push_back(std::make_unique<broker::BrokerTransport>(send[r], receive[r], 64,
                                                           std::chrono::milliseconds(300)));
    tr.back()->begin(r, n);
  }
  broker::Broker b(links);
  std::thread loop([&] { b.run(); });
  tr[0]->send_segment(2, "from zero", 9);  // arrives first, taken second
  tr[1]->send_segment(2, "from one", 8);
  std::string got;
  auto keep = [&](const void* p, std::size_t len) { got.assign(static_cast<const char*>(p), len); };
  tr[2]->recv_segment(1, keep);
  CHECK(got == "from one");
  tr[2]->recv_segment(0, keep);
  CHECK(got == "from zero");
  CHECK_THROWS_WITH(tr[0]->send_segment(1, std::string(65, 'x').data(), 65),
                    doctest::Contains("a link takes at most 64"));
  CHECK_THROWS_WITH(tr[0]->send_segment(0, "me", 2), doctest::Contains("and not itself"));
  CHECK_THROWS_WITH(tr[1]->recv_segment(0, keep),
                    doctest::Contains("timed out after 0.3 s waiting for a segment from rank 0"));
  b.inject(1, "rank 1 failed because rank 0 failed");
  CHECK_THROWS_WITH(tr[1]->recv_segment(0, keep), "rank 1 failed because rank 0 failed");
  tr.clear();
  for (int r = 0; r < n; ++r) {  // every rank gone: the broker's loop ends
    ::close(send[r]);
    ::close(receive[r]);
  }
  loop.join();
}
