// mailbox_transport.h: the Transport protocol both CPU transports share, over one block of
// memory that every rank maps (a POSIX shm segment between processes, the heap between
// threads). The block holds, for each rank, a status (pid, failed flag, reason) and, for
// each ordered pair s -> r, a link: kSlots slots of kSegmentBytes plus two counters,
// `written` (bumped by s) and `consumed` (bumped by r). A slot is free while
// written - consumed < kSlots. A wait has three phases (WaitPolicy, below): it spins
// briefly, then yields its core (sched_yield) for a while, then sleeps in
// futex(FUTEX_WAIT) on the counter (not the _PRIVATE variant, so a write in another
// process wakes us), waking every few ms to check the deadline, the peers' failed flags,
// and whether the awaited peer still lives (pid) and has not left the group: nothing more
// can come from it then. A sleeper raises the link's `sleeping` flag first, so a bump
// makes the FUTEX_WAKE system call only when someone sleeps.
// Each rank also files its progress (collectives started, the current one's name, the peer
// it waits on), so a rank whose wait times out can name the rank that stopped
// (hang_report.h) instead of the neighbour it happened to wait on.
// Where the slot bytes live is a hook: in this block (shm, threads), or in GPU memory
// (cuda_ipc_transport.cpp overrides the three slot_* functions; flags and waits stay here).
// Read next: mailbox_transport.cpp, shm_transport.h, thread_transport.h.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "parallel/transport/transport.h"

namespace dplab::parallel {

inline constexpr uint32_t kSlots = 4;  // slots per link: the pipeline depth

struct alignas(64) RankStatus {
  std::atomic<uint32_t> failed;  // 0 ok, 1 failed (why holds the reason)
  std::atomic<uint32_t> left;    // 1 once its ProcessGroup was destroyed normally
  int32_t pid;                   // 0: do not check liveness (threads of one process)
  char why[1000];                // long enough for a hang report (hang_report.h)
  // Progress, for the hang report: read by other ranks only after a wait timed out.
  std::atomic<uint64_t> collectives;  // collectives started (set_context calls)
  std::atomic<int32_t> waiting_on;    // peer + 1 while in a wait, 0 while not waiting
  std::atomic<int64_t> heartbeat_ns;  // steady clock, bumped every sleep slice of a wait
  char collective[52];                // the current collective's name
};

struct alignas(64) LinkHeader {
  alignas(64) std::atomic<uint32_t> written;   // segments the sender has filled
  std::atomic<uint32_t> receiver_sleeping;     // 1 while the receiver sleeps on `written`
  alignas(64) std::atomic<uint32_t> consumed;  // segments the receiver has freed
  std::atomic<uint32_t> sender_sleeping;       // 1 while the sender sleeps on `consumed`
  uint32_t lens[kSlots];                       // bytes in each slot, set before `written`
  uint64_t notes[kSlots];                      // each slot's note (Transport::send_noted)
};

// How a wait spends its time before it sleeps (why, in this order: tutorials/16_ps_vs_ring.md,
// "Waiting"; the measurements behind the defaults: docs/measurements/allreduce_cpu.md):
//   spin_us: poll the counter (with a pause): a hand-off between two running ranks costs
//         well under a microsecond. 10 us while every rank has a core, 2 us when ranks
//         outnumber the cores: then the rank we wait for may need the very core we spin on
//         (and other programs' processes can put two ranks on one core even when N <= cores);
//   yield_us: then sched_yield() between polls, for up to this long: hands the core to a
//         rank queued behind us, which writes and lets us go on within microseconds. But a
//         yield also hands the core to any other program's busy process, which may keep it
//         for a whole time slice (milliseconds): a yield that took longer than 100 us says
//         so (that wait sleeps), and after 3 such waits in a row this rank skips the yield
//         phase for the next 100 ms;
//   then futex sleep: a wake-up costs several microseconds but no CPU, and the scheduler runs
//         a woken sleeper ahead of processes that were busy all along.
// DPLAB_WAIT="spin_us,yield_us" (e.g. "2,0") overrides both, for measuring.
struct WaitPolicy {
  int spin_us = 10;
  int yield_us = 200;
};
// The defaults for `ranks` ranks on this process's cores, or DPLAB_WAIT's.
WaitPolicy wait_policy(int ranks);

// The CPUs this process may run on (sched_getaffinity), at least 1: whether every rank has
// a core of its own decides the wait policy, the shm slot size and the cost model's choice.
int cpu_cores();

// The slot size of the shm transport for `ranks` ranks on `cores` cores (chosen with
// bench_allreduce on 2 cores: docs/measurements/allreduce_cpu.md, "Slots"). While every rank
// has a core, 1 MiB: a hand-off costs about a microsecond, and fewer, longer copies stream
// better. With more ranks than cores, 256 KiB: each hand-off may wait for the scheduler, so
// fewer are better, but a chunk cut into too few segments leaves the ranks that do run nothing
// to overlap.
// DPLAB_SEGMENT_KB overrides it, for measuring. The thread transport keeps kSegmentBytes.
std::size_t shm_segment_bytes(int ranks, int cores = cpu_cores());

// Whether process pid still runs (false for a zombie: killed, not yet reaped).
bool pid_alive(int32_t pid);

// Bytes a world of `size` ranks needs when each slot holds slot_bytes in the block (0: the
// slots live elsewhere); zero-filled memory of this size is a valid state.
std::size_t mailbox_bytes(int size, std::size_t slot_bytes = kSegmentBytes);

class MailboxTransport : public Transport {
 public:
  // memory: mailbox_bytes(size, slot_bytes) bytes, kept alive by `owner` (munmap or free in
  // its deleter).
  MailboxTransport(std::shared_ptr<void> owner, void* memory, int rank, int size, Seconds timeout,
                   std::string name, std::size_t slot_bytes = kSegmentBytes);
  ~MailboxTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::size_t segment_bytes() const override { return slot_bytes_; }
  // Files the collective's name and number in this rank's status, for the hang report.
  void set_context(const std::string& collective) override;
  void send_segment(int peer, const void* src, std::size_t len) override;
  void recv_segment(int peer,
                    const std::function<void(const void* data, std::size_t len)>& use) override;
  void send_noted(int peer, const void* src, std::size_t len, uint64_t note) override;
  uint64_t received_note(int peer) const override;
  void mark_failed(const std::string& why) override;
  void mark_left() override;

  RankStatus& status(int r) const { return statuses_[r]; }

 protected:
  // The data plane, in the block by default. slot_fill: copy len bytes into slot `index` of
  // the link me -> to; they must be readable by `to` when it returns. slot_view: what the
  // receiver's use() reads for slot `index` of from -> me. slot_read_done: called after
  // use(), before the slot is freed; asynchronous reads of the slot must be over then.
  virtual void slot_fill(int to, uint32_t index, const void* src, std::size_t len);
  virtual const void* slot_view(int from, uint32_t index);
  virtual void slot_read_done() {}

 private:
  LinkHeader& link(int from, int to) const { return links_[from * size_ + to]; }
  std::byte* slot(int from, int to, uint32_t index) const;
  // Returns once ready() holds; throws CommError on timeout, a failed peer or a dead pid.
  // `sleeping` is the link's flag for this side: raised while it sleeps on `word`.
  template <typename Ready>
  void wait_for(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleeping, Ready ready, int peer,
                const char* waiting_for);
  // Why waiting on `peer` is hopeless (it left, died, or some rank failed), if it is.
  std::optional<std::string> problem(int peer, bool check_pid);
  // After a timeout: which rank stopped making progress, from every rank's filed status.
  std::string hang_report(int peer) const;

  std::shared_ptr<void> owner_;
  int rank_, size_;
  Seconds timeout_;
  std::string name_;
  std::size_t slot_bytes_;
  WaitPolicy policy_;  // wait_policy(size)
  std::chrono::steady_clock::time_point
      no_yield_until_{};  // yields kept losing the core: sleep instead
  int long_yields_ = 0;   // waits in a row whose yield lost the core for long
  std::string context_ = "(no collective)";
  uint64_t collectives_ = 0;  // set_context calls so far: the current collective's number
  RankStatus* statuses_;
  LinkHeader* links_;
  std::byte* slots_;
};

}  // namespace dplab::parallel
