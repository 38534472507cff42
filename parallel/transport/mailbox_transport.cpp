// mailbox_transport.cpp: slots, counters and waits. The only code here that touches other
// ranks' memory; no arithmetic, only memcpy and atomics.
// Cost per segment: one memcpy by the sender, one read (reduce or copy) by the receiver,
// and a FUTEX_WAKE system call only when the other side has gone to sleep.
// Read next: shm_transport.cpp.
#include "parallel/transport/mailbox_transport.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sched.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

#include "framework/error.h"
#include "framework/io/settings.h"
#include "parallel/transport/hang_report.h"

namespace dplab::parallel {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSleepSlice = std::chrono::milliseconds(5);
constexpr auto kPidCheckEvery = std::chrono::milliseconds(50);

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen) {
  timespec ts{0, std::chrono::duration_cast<std::chrono::nanoseconds>(kSleepSlice).count()};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

WaitPolicy wait_policy(int ranks) {
  static const std::optional<WaitPolicy> from_env = []() -> std::optional<WaitPolicy> {
    const auto v = setting_value("DPLAB_WAIT");
    if (!v) return std::nullopt;
    const WaitSetting w = parse_wait_setting(*v);
    return WaitPolicy{.spin_us = w.spin_us, .yield_us = w.yield_us};
  }();
  if (from_env) return *from_env;
  return ranks <= cpu_cores() ? WaitPolicy{.spin_us = 10, .yield_us = 200}
                              : WaitPolicy{.spin_us = 2, .yield_us = 200};
}

int cpu_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::size_t shm_segment_bytes(int ranks, int cores) {
  if (const auto v = setting_value("DPLAB_SEGMENT_KB")) return parse_segment_kb_setting(*v);
  return ranks <= cores ? std::size_t{1} << 20 : std::size_t{256} << 10;
}

// kill(pid, 0) succeeds on a zombie (killed but not yet reaped), so read its state.
bool pid_alive(int32_t pid) {
  char state = process_state(pid);
  return state != 'Z' && state != 'X';
}

std::size_t mailbox_bytes(int size, std::size_t slot_bytes) {
  std::size_t n = static_cast<std::size_t>(size);
  return round_up(n * sizeof(RankStatus), 64) + round_up(n * n * sizeof(LinkHeader), 64) +
         n * n * kSlots * slot_bytes;
}

MailboxTransport::MailboxTransport(std::shared_ptr<void> owner, void* memory, int rank, int size,
                                   Seconds timeout, std::string name, std::size_t slot_bytes)
    : owner_(std::move(owner)), rank_(rank), size_(size), timeout_(timeout), name_(std::move(name)),
      slot_bytes_(slot_bytes), policy_(wait_policy(size)) {
  auto* base = static_cast<std::byte*>(memory);
  std::size_t n = static_cast<std::size_t>(size);
  statuses_ = reinterpret_cast<RankStatus*>(base);
  links_ = reinterpret_cast<LinkHeader*>(base + round_up(n * sizeof(RankStatus), 64));
  slots_ = base + round_up(n * sizeof(RankStatus), 64) + round_up(n * n * sizeof(LinkHeader), 64);
}

MailboxTransport::~MailboxTransport() = default;

std::byte* MailboxTransport::slot(int from, int to, uint32_t index) const {
  std::size_t link_index = static_cast<std::size_t>(from) * size_ + to;
  return slots_ + (link_index * kSlots + index % kSlots) * slot_bytes_;
}

void MailboxTransport::slot_fill(int to, uint32_t index, const void* src, std::size_t len) {
  if (len) std::memcpy(slot(rank_, to, index), src, len);
}

const void* MailboxTransport::slot_view(int from, uint32_t index) {
  return slot(from, rank_, index);
}

std::optional<std::string> MailboxTransport::problem(int peer, bool check_pid) {
  // Only the awaited peer's departure matters: another rank may have finished and exited
  // cleanly, and a dead rank elsewhere in the pattern is found by the rank waiting on it,
  // whose failure then reaches us through its flag.
  std::optional<std::string> gone;
  RankStatus& p = statuses_[peer];
  if (p.left.load(std::memory_order_acquire))
    gone = fmt::format("rank {}: {} failed: rank {} left the group (destroyed its "
                       "ProcessGroup) while rank {} still waits on it",
                       rank_, context_, peer, rank_);
  else if (check_pid && p.pid != 0 && !pid_alive(p.pid))
    gone = fmt::format("rank {}: {} failed: rank {} (pid {}) died while rank {} waits on it", rank_,
                       context_, peer, p.pid, rank_);
  // Failed flags are read after that, so a rank that failed and then exited is reported
  // with its reason rather than as merely dead.
  // Name the first cause: a rank that failed on its own, rather than one that only failed
  // because another had (its reason would nest the cause's).
  std::optional<std::string> echo;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    RankStatus& s = statuses_[r];
    if (!s.failed.load(std::memory_order_acquire)) continue;
    std::string why(s.why, strnlen(s.why, sizeof(s.why)));
    std::string msg = fmt::format("rank {}: {} failed because rank {} failed ({}) while "
                                  "waiting on rank {}",
                                  rank_, context_, r, why, peer);
    if (why.find("failed because rank") == std::string::npos) return msg;
    if (!echo) echo = msg;
  }
  return echo ? echo : gone;
}

// Why these phases (bench_allreduce at 4 KiB on 2 cores shared with other programs; the
// table is in tutorials/16_ps_vs_ring.md, "Waiting"; more runs in
// docs/measurements/allreduce_cpu.md): with a core per rank the peer's write comes
// within microseconds and a spin catches it; with more ranks than cores a long spin burns
// the slice the peer needs, and yielding hands it over at once, sooner than a sleeping
// rank is woken. But a yield can also give the core to
// another program's busy process for a whole slice (under heavy load some runs took
// milliseconds per all-reduce): a wait whose yield took longer than kLongYield sleeps on the
// futex instead, and kLongYieldsToStop such waits in a row turn yielding off for
// kNoYieldFor. One is not enough: on a quiet virtual machine a single yield can take that
// long when the hypervisor borrows the core, and a futex wake-up costs several times a
// yield there, so one hiccup would cost kNoYieldFor of slow waits.
constexpr auto kLongYield = std::chrono::microseconds(100);
constexpr int kLongYieldsToStop = 3;
constexpr auto kNoYieldFor = std::chrono::milliseconds(100);

template <typename Ready>
void MailboxTransport::wait_for(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleeping,
                                Ready ready, int peer, const char* waiting_for) {
  if (ready()) return;
  if (policy_.spin_us > 0) {
    const auto until = Clock::now() + std::chrono::microseconds(policy_.spin_us);
    do {
      for (int i = 0; i < 32; ++i) {  // ~0.3-1.5 us of polls between looks at the clock
        if (ready()) return;
        cpu_relax();
      }
    } while (Clock::now() < until);
  }
  if (policy_.yield_us > 0 && Clock::now() >= no_yield_until_) {
    const auto until = Clock::now() + std::chrono::microseconds(policy_.yield_us);
    for (auto now = Clock::now(); now < until;) {
      if (ready()) {
        long_yields_ = 0;
        return;
      }
      sched_yield();
      const auto back = Clock::now();
      if (back - now > kLongYield) {  // someone else had the core: sleep this time ...
        if (++long_yields_ >= kLongYieldsToStop) {  // ... and, if it keeps it, for a while
          no_yield_until_ = back + kNoYieldFor;
          long_yields_ = 0;
        }
        break;
      }
      now = back;
    }
  }
  // filed while we sleep, so a rank that times out can follow who waits on whom. A wait that
  // ends in an error (a timeout, a dead peer) leaves it filed: this rank gave up waiting on
  // that peer, and a rank that times out after it must follow the chain through it to the
  // rank that stopped, not stop at it ("waits on no rank")
  struct Waiting {
    RankStatus& me;
    const int errors_before = std::uncaught_exceptions();
    Waiting(RankStatus& s, int peer) : me(s) {
      me.heartbeat_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      me.waiting_on.store(peer + 1, std::memory_order_release);
    }
    ~Waiting() {
      if (std::uncaught_exceptions() == errors_before)
        me.waiting_on.store(0, std::memory_order_release);
    }
  } waiting(statuses_[rank_], peer);
  auto start = Clock::now();
  auto next_pid_check = start;
  for (;;) {
    uint32_t seen = word.load(std::memory_order_acquire);
    if (ready()) return;
    auto now = Clock::now();
    bool check_pid = now >= next_pid_check;
    if (check_pid) next_pid_check = now + kPidCheckEvery;
    if (auto why = problem(peer, check_pid)) {
      // a peer that sent its last segment and then left (or died) is no failure: look again
      if (ready()) return;
      throw CommError(*why);
    }
    statuses_[rank_].heartbeat_ns.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    if (now - start > timeout_) {
      throw CommError(fmt::format("rank {}: {} #{} timed out after {:.1f} s waiting for {} "
                                  "rank {}; {}",
                                  rank_, context_, collectives_, timeout_.count(), waiting_for,
                                  peer, hang_report(peer)));
    }
    // Raise the flag, then look once more: the peer bumps the counter, then reads the flag
    // (both seq_cst), so either it sees the flag and wakes us, or we see its bump here.
    // (futex_wait itself also returns at once if the counter moved from `seen`.)
    sleeping.store(1, std::memory_order_seq_cst);
    seen = word.load(std::memory_order_seq_cst);
    if (!ready()) futex_wait(&word, seen);
    sleeping.store(0, std::memory_order_relaxed);
  }
}

void MailboxTransport::set_context(const std::string& collective) {
  context_ = collective;
  RankStatus& me = statuses_[rank_];
  std::size_t n = std::min(collective.size(), sizeof(me.collective) - 1);
  std::memcpy(me.collective, collective.data(), n);
  me.collective[n] = '\0';
  me.collectives.store(++collectives_, std::memory_order_release);
}

std::string MailboxTransport::hang_report(int peer) const {
  std::vector<RankProgress> ranks(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const RankStatus& s = statuses_[r];
    RankProgress& p = ranks[r];
    p.collectives = s.collectives.load(std::memory_order_acquire);
    p.collective = std::string(s.collective, strnlen(s.collective, sizeof(s.collective)));
    if (p.collective.empty()) p.collective = "(no collective yet)";
    p.waiting_on = s.waiting_on.load(std::memory_order_acquire) - 1;
    p.process_state = s.pid != 0 ? process_state(s.pid) : '?';
    const int64_t beat = s.heartbeat_ns.load(std::memory_order_relaxed);
    p.silent_s =
        beat == 0
            ? 0.0
            : std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(beat))
                  .count();
  }
  return describe_hang(rank_, peer, ranks);
}

void MailboxTransport::send_segment(int peer, const void* src, std::size_t len) {
  send_noted(peer, src, len, 0);
}

void MailboxTransport::send_noted(int peer, const void* src, std::size_t len, uint64_t note) {
  DPLAB_CHECK(peer >= 0 && peer < size_ && peer != rank_,
              "send_segment: peer must be another rank in [0, {}), got {} (I am rank {})", size_,
              peer, rank_);
  DPLAB_CHECK(len <= segment_bytes(), "send_segment: {} bytes exceed the {}-byte slot", len,
              segment_bytes());
  LinkHeader& l = link(rank_, peer);
  uint32_t w = l.written.load(std::memory_order_relaxed);  // only this rank writes it
  // wait until the receiver has freed the slot we are about to fill
  wait_for(
      l.consumed, l.sender_sleeping,
      [&] { return w - l.consumed.load(std::memory_order_acquire) < kSlots; }, peer,
      "a free slot towards");
  slot_fill(peer, w, src, len);
  l.lens[w % kSlots] = static_cast<uint32_t>(len);
  l.notes[w % kSlots] = note;
  l.written.store(w + 1, std::memory_order_seq_cst);  // publishes the bytes and the length
  if (l.receiver_sleeping.load(std::memory_order_seq_cst)) futex_wake(&l.written);
}

void MailboxTransport::recv_segment(
    int peer, const std::function<void(const void* data, std::size_t len)>& use) {
  DPLAB_CHECK(peer >= 0 && peer < size_ && peer != rank_,
              "recv_segment: peer must be another rank in [0, {}), got {} (I am rank {})", size_,
              peer, rank_);
  LinkHeader& l = link(peer, rank_);
  uint32_t c = l.consumed.load(std::memory_order_relaxed);  // only this rank writes it
  // wait for the write from the peer
  wait_for(
      l.written, l.receiver_sleeping,
      [&] { return l.written.load(std::memory_order_acquire) != c; }, peer, "data from");
  use(slot_view(peer, c), l.lens[c % kSlots]);
  slot_read_done();  // e.g. a GPU reduce of the slot has finished: it may be overwritten
  l.consumed.store(c + 1, std::memory_order_seq_cst);  // the slot may be refilled now
  if (l.sender_sleeping.load(std::memory_order_seq_cst)) futex_wake(&l.consumed);
}

// Inside recv_segment's use(), `consumed` still counts the slot being read.
uint64_t MailboxTransport::received_note(int peer) const {
  const LinkHeader& l = link(peer, rank_);
  return l.notes[l.consumed.load(std::memory_order_relaxed) % kSlots];
}

void MailboxTransport::mark_left() {
  statuses_[rank_].left.store(1, std::memory_order_release);
  for (int a = 0; a < size_; ++a) {
    futex_wake(&link(a, rank_).consumed);  // a's waits for a free slot towards me
    futex_wake(&link(rank_, a).written);   // a's waits for data from me
  }
}

void MailboxTransport::mark_failed(const std::string& why) {
  RankStatus& s = statuses_[rank_];
  if (s.failed.load()) return;
  std::size_t n = std::min(why.size(), sizeof(s.why) - 1);
  std::memcpy(s.why, why.data(), n);
  s.why[n] = '\0';
  s.failed.store(1, std::memory_order_release);
  // wake every sleeper so they see the flag now, not at their next slice
  for (int a = 0; a < size_; ++a)
    for (int b = 0; b < size_; ++b) {
      futex_wake(&link(a, b).written);
      futex_wake(&link(a, b).consumed);
    }
}

}  // namespace dplab::parallel
