// remote.cpp: hw3's ring_all_reduce for the judge, the test program that holds the verdict
// channel and never loads the student's code. The grader starts every rank as a process of
// its own, each as its own user, and gives the judge each rank's two control pipes and two
// broker pipes (DPLAB_COURSE_RANK_FDS). The tests' rank threads stay as they are; each, where
// a student's build would run the ring, sends its rank's input to its process (remote.h) and
// waits for the result. The broker runs here, on a thread of its own, and counts every byte a
// rank sends, so the traffic test reads counts no rank can change. The ranks of one call meet
// before it (the counts as it begins) and after it (the counts once nothing is on its way).
// The library's ring, for the speed test, runs on as many ranks the judge forks before its
// tests start (rank_loop.h), processes behind a broker of their own as the student's are:
// timed the same way, with none of the student's code near it.
// Read next: rank_loop.h, worker.cpp (a rank), ../common/broker.h.
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "broker.h"
#include "broker_transport.h"
#include "judge_side.h"
#include "observe.h"
#include "parallel/algorithms/collectives.h"
#include "rank_loop.h"
#include "remote.h"
#include "ring.h"
#include "wire.h"

namespace hw3 {
namespace {

using course::broker::Broker;
using course::judge::Meeting;
using Rank = course::judge::Process;  // a rank's control pipes

// The broker's caps for hw3: frames of one segment, and a few segments waiting per rank.
course::broker::Options broker_options() {
  return {.max_frame = static_cast<std::uint32_t>(remote::kSegmentBytes + 1),
          .max_queued = std::int64_t{8} * static_cast<std::int64_t>(remote::kSegmentBytes + 5)};
}

// A broker on a detached thread of its own, over `links`. Never deleted: its thread may
// still forward the last frames while the test program exits.
Broker* start_broker(const std::vector<course::broker::Link>& links) {
  auto* b = new Broker(links, broker_options());
  std::thread([b] { b->run(); }).detach();
  return b;
}

// Ranks that are processes of their own, their control pipes, and the broker between them.
// Each rank's call runs on a thread of the tests; the threads of one call meet before it (the
// counts as it begins), when every rank holds its input (the clock starts), and after it
// (the counts once nothing is on its way).
class RankSet {
 public:
  RankSet(std::vector<Rank> ranks, const std::vector<course::broker::Link>& links)
      : ranks_(std::move(ranks)), broker_(start_broker(links)) {}
  int size() const { return static_cast<int>(ranks_.size()); }
  // Rank r's part of a call over ranks 0..n-1; throws what the test is told when it failed.
  // Fills log's byte counts, steps and time (from go to the reply's first byte).
  void call(int r, int n, std::byte* data, int64_t count, DType dtype, Op op, observe::Log* log);

 private:
  std::string send_input(int r, int n, const std::byte* data, int64_t count, DType dtype, Op op,
                         bool dry);
  std::string run(int r, std::byte* data, std::size_t bytes, observe::Log* log);
  std::string error_in(int r, const std::string& reply);
  std::string lose(int r, const std::string& why) { return ranks_[r].lose(why); }
  std::string deadlock_words(const std::vector<std::vector<std::int64_t>>& waiting) const;
  std::vector<Rank> ranks_;
  Broker* broker_;
  int size_of_call_ = 0;
  Meeting before_, ready_, after_;
  std::chrono::steady_clock::time_point go_;  // when every rank of the call held its input
  course::broker::Report start_, end_;        // the counts as the call began, and after it
};

void RankSet::call(int r, int n, std::byte* data, int64_t count, DType dtype, Op op,
                   observe::Log* log) {
  if (n > size() || r < 0 || r >= n)
    throw std::logic_error("the test asked for rank " + std::to_string(r) + " of " +
                           std::to_string(n) + ", and the grader started " +
                           std::to_string(size()) + " (assignment.json's ranks)");
  const bool dry = log && log->dry;
  const std::size_t bytes = dry ? 0 : static_cast<std::size_t>(count) * dplab::element_size(dtype);
  before_.meet(n, [&] {
    start_ = broker_->report();
    size_of_call_ = n;
  });
  std::string failure = send_input(r, n, data, count, dtype, op, dry);
  ready_.meet(n, [&] { go_ = std::chrono::steady_clock::now(); });  // every rank holds its input
  if (failure.empty()) failure = run(r, data, bytes, log);
  if (!failure.empty()) broker_->tell_failed(r, n);  // the ranks that wait on it stop waiting
  after_.meet(n, [&] { end_ = broker_->settled_report(); });  // what was sent, counted
  if (log) {
    log->sent_to.assign(n, 0);
    log->received = 0;
    for (int k = 0; k < n; ++k) {
      log->sent_to[k] = end_.bytes[r][k] - start_.bytes[r][k];
      log->received += end_.bytes[k][r] - start_.bytes[k][r];
    }
  }
  if (!failure.empty()) throw std::runtime_error(failure);
}

// The words of a standstill where every rank blocks sending (deadlock.h says the same of
// ranks that are threads).
std::string RankSet::deadlock_words(const std::vector<std::vector<std::int64_t>>& waiting) const {
  std::string who;
  for (std::size_t s = 0; s < waiting.size(); ++s)
    for (std::size_t d = 0; d < waiting[s].size(); ++d)
      if (waiting[s][d] > 0)
        who += (who.empty() ? "" : ", ") + std::string("rank ") + std::to_string(s) + " has " +
               std::to_string(waiting[s][d]) + " bytes waiting for rank " + std::to_string(d);
  return "deadlock: each rank sent more segments than a link holds to a rank that has not "
         "taken them (" + who + "), and waits for room that its receiver would make only by "
         "receiving; but the receiver is itself blocked sending: every rank blocks on a full "
         "slot. Send and receive segment by segment (exchange() interleaves them)";
}

// The call's input to rank r, and its word that it is ready: "" when it came, else what the
// test is told.
std::string RankSet::send_input(int r, int n, const std::byte* data, int64_t count, DType dtype,
                                Op op, bool dry) {
  Rank& rank = ranks_[r];
  if (rank.lost) return "ring_all_reduce() was not run: " + rank.why;
  course::wire::Writer request;
  request.i64(r);
  request.i64(n);
  request.i64(count);
  request.u8(static_cast<std::uint8_t>(dtype));
  request.u8(static_cast<std::uint8_t>(op));
  request.u8(dry ? 1 : 0);
  request.blob(data, dry ? 0 : static_cast<std::size_t>(count) * dplab::element_size(dtype));
  if (!course::wire::write_frame(rank.to, request.bytes(), UINT32_MAX))
    return lose(r, "the process running your code as rank " + std::to_string(r) +
                       " had ended before the call (a crash, or an exit, above?)");
  std::string ready;
  if (course::wire::read_frame(rank.from, ready, 64 + course::wire::kMaxString) !=
      course::wire::Read::kFrame)
    return lose(r, "the process running your code as rank " + std::to_string(r) +
                       " ended before ring_all_reduce began (a crash, or an exit?)");
  if (ready == std::string(1, remote::kReady)) return "";
  return error_in(r, ready);
}

// A reply that says the call threw: its message (or, when it says nothing the protocol
// allows, that).
std::string RankSet::error_in(int r, const std::string& reply) {
  try {
    course::wire::Reader in(reply);
    if (in.u8() != 1) throw course::wire::Error("an answer the call had not come to");
    std::string why = in.str();
    in.end();
    return why.empty() ? "an exception without a message" : why;
  } catch (const course::wire::Error& e) {
    return lose(r, "the process running your code as rank " + std::to_string(r) +
                       " answered what the grader does not read: " + e.what());
  }
}

// Go, the clock, and the result: "" when the ring returned, else what the test is told.
std::string RankSet::run(int r, std::byte* data, std::size_t bytes, observe::Log* log) {
  Rank& rank = ranks_[r];
  if (!course::wire::write_frame(rank.to, std::string(1, remote::kGo)))
    return lose(r, "the process running your code as rank " + std::to_string(r) +
                       " ended before the call (a crash, or an exit?)");
  // the reply's first byte, or a standstill: every rank of the call blocked sending to a rank
  // that does not receive (no link of the library holds more than a few segments either)
  pollfd first{rank.from, POLLIN, 0};
  std::int64_t moved = -1;
  for (int still = 0;;) {
    const int ready = ::poll(&first, 1, 250);
    if (ready > 0 || (ready < 0 && errno != EINTR)) break;
    std::vector<std::vector<std::int64_t>> waiting;
    const bool blocked = broker_->all_blocked_sending(size_of_call_, waiting);
    const std::int64_t now = broker_->moved();
    still = blocked && now == moved ? still + 1 : 0;
    moved = now;
    if (still >= 4) return lose(r, deadlock_words(waiting));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - go_).count();
  std::string reply;
  const auto most = static_cast<std::uint32_t>(std::min<std::uint64_t>(
      UINT32_MAX, 64 + bytes + static_cast<std::uint64_t>(remote::kMaxRecords) * 49));
  switch (course::wire::read_frame(rank.from, reply, most)) {
    case course::wire::Read::kFrame: break;
    case course::wire::Read::kTooLong:
      return lose(r, "the process running your code as rank " + std::to_string(r) +
                         " answered with more bytes than the grader reads");
    default:
      return lose(r, "the process running your code as rank " + std::to_string(r) +
                         " ended before ring_all_reduce returned (a crash, or an exit?)");
  }
  if (!reply.empty() && reply[0] != 0) return error_in(r, reply);
  try {
    course::wire::Reader in(reply);
    in.u8();
    const char* result = in.blob(bytes);
    const std::int64_t divides = in.i64(), records = in.i64();
    if (records < 0 || records > remote::kMaxRecords)
      throw course::wire::Error(std::to_string(records) + " step records");
    std::vector<observe::Exchange> steps;
    for (std::int64_t i = 0; i < records; ++i) {
      observe::Exchange e{};
      e.to = static_cast<int>(in.i64());
      e.from = static_cast<int>(in.i64());
      e.out = data + in.i64();  // offsets: only compared with the schedule's, never dereferenced
      e.out_bytes = in.i64();
      e.in = data + in.i64();
      e.in_bytes = in.i64();
      e.how = in.u8() == 0 ? Combine::Reduce : Combine::Copy;
      steps.push_back(e);
    }
    in.end();
    std::copy_n(reinterpret_cast<const std::byte*>(result), bytes, data);
    if (log) {
      log->divides = static_cast<int>(divides);
      log->exchanges = std::move(steps);
      log->seconds = seconds;
    }
  } catch (const course::wire::Error& e) {
    return lose(r, "the process running your code as rank " + std::to_string(r) +
                       " answered what the grader does not read: " + e.what());
  }
  return "";
}

// The library's ring on a rank the judge forked (no student code near it).
void library_ring(Transport& tr, std::byte* data, int64_t count, DType dtype, Op) {
  dplab::parallel::Traffic traffic;
  dplab::parallel::Exchange ex{tr, dtype, dplab::ReduceKind::Sum, traffic};
  dplab::parallel::ring_all_reduce(ex, {data, count});
}

// Forks `count` ranks of the library's ring, before any thread starts (remote.cpp's static
// initialiser: the tests' threads and the brokers' come later). Each keeps its four pipes and
// nothing else of the judge's, and dies with it.
RankSet fork_library_ranks(int count) {
  std::vector<Rank> ranks;
  std::vector<course::broker::Link> links;
  for (int r = 0; r < count; ++r) {
    int ctl_in[2], ctl_out[2], up[2], down[2];
    if (::pipe(ctl_in) || ::pipe(ctl_out) || ::pipe(up) || ::pipe(down))
      throw std::runtime_error("the judge could not make pipes for the library's ranks");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int keep[] = {ctl_in[0], ctl_out[1], up[1], down[0]};
      for (int fd = 3; fd < 1024; ++fd)
        if (std::find(std::begin(keep), std::end(keep), fd) == std::end(keep)) ::close(fd);
      remote::serve_calls(ctl_in[0], ctl_out[1], up[1], down[0], &library_ring,
                          "the library's all_reduce(ring)");
      ::_exit(0);
    }
    for (int fd : {ctl_in[0], ctl_out[1], up[1], down[0]}) ::close(fd);
    if (pid < 0) throw std::runtime_error("the judge could not fork the library's ranks");
    ranks.push_back({ctl_in[1], ctl_out[0]});
    links.push_back({up[0], down[1]});
  }
  return RankSet(std::move(ranks), links);
}

// The judge's two sets of ranks: the student's, which the grader started (DPLAB_COURSE_RANK_FDS),
// and as many of the library's, forked here.
class Judge : public observe::Outside {
 public:
  explicit Judge(course::judge::Ranks students)
      : library_(fork_library_ranks(static_cast<int>(students.control.size()))) {
    students_.emplace(std::move(students.control), students.links);
  }
  void ring_all_reduce(int r, int n, std::byte* data, int64_t count, DType dtype, Op op) {
    students_->call(r, n, data, count, dtype, op, observe::current());
  }
  double library_all_reduce(int rank, int size, std::byte* data, int64_t count) override {
    observe::Log log;
    library_.call(rank, size, data, count, DType::Float32, Op::Sum, &log);
    return log.seconds;
  }

 private:
  RankSet library_;
  std::optional<RankSet> students_;
};

Judge* judge = nullptr;  // none where the grader started no ranks (the judge run by hand)

// Before main(), while the judge has one thread: the tests ask for the library's ring through it.
const bool registered = [] {
  course::judge::Ranks students = course::judge::ranks_from_env();
  if (!students.control.empty()) {
    // never deleted: its brokers' threads may outlive main()
    judge = new Judge(std::move(students));
    observe::outside() = judge;
  }
  return true;
}();

}  // namespace

// The tests call this where a student's build runs their ring: rank tr.rank() of tr.size()
// runs in its own process; `tr` (the test's thread transport) carries nothing here.
void ring_all_reduce(Transport& tr, std::byte* data, int64_t count, DType dtype, Op op) {
  if (!judge)
    throw std::runtime_error(
        "ring_all_reduce(): no rank processes to run it (this test program is the grader's "
        "judge; `meson test` in your folder runs your ring in the tests' own threads)");
  judge->ring_all_reduce(tr.rank(), tr.size(), data, count, dtype, op);
}

}  // namespace hw3
