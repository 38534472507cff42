// broker.h: the only link between the ranks of an assignment judged outside the student's
// process (#45 item 2; hw3). Each rank is a process of its own with two pipes, both to the
// broker, which the judge owns; the broker forwards what a rank sends to the rank it names
// and counts every byte where no rank can change the count.
//   to the broker   = frame of [u8 destination rank][payload]
//   from the broker = frame of [u8 source rank][payload]   (source kJudge: a notice of the judge's)
// Frames are common/wire.h's ([u32 length][bytes], at most max_frame). The broker never
// blocks on one rank: it reads whatever any rank has written and writes to a rank only what
// its pipe takes (queues between), so two ranks that send to each other at once cannot
// stall it. It stops reading from a rank while more than max_queued of that rank's bytes wait
// for their receivers (the judge's memory is not the student's to fill; a link of the library
// also has room for a few segments only). A rank that names no rank (or itself), writes a
// frame past the cap, or closes in the middle of one is reported by number; the others keep
// running to the end.
// Cost: every byte crosses two pipes (rank -> broker -> rank) and is counted once, as sent.
// Read next: wire.h, broker_transport.h (a rank's side), ../tests/test_broker.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wire.h"

namespace course::broker {

inline constexpr int kJudge = 255;  // the source of a frame the judge put in (inject)

struct Link {
  int from_rank = -1;  // the broker reads what the rank sends here
  int to_rank = -1;    // and writes what the rank receives here
};

struct Report {
  // bytes[s][d]: payload bytes rank s sent to rank d (the frames' headers not counted)
  std::vector<std::vector<std::int64_t>> bytes;
  std::vector<std::vector<std::int64_t>> messages;
  std::vector<std::string> problems;  // "rank 2 sent a frame to rank 7, and there are 4 ranks"
};

struct Options {
  std::uint32_t max_frame = wire::kMaxFrame;
  std::int64_t max_queued = std::int64_t{64} << 20;  // a rank's bytes waiting for receivers
};

// A broker over links.size() ranks (at most 254), run by one thread (run()) while others
// read its counts and put notices in. It owns the links' descriptors.
class Broker {
 public:
  explicit Broker(const std::vector<Link>& links, Options options = {});
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  // Forwards frames until every rank has closed the pipe it sends on and every queued frame
  // has been delivered or its rank is gone. Closes every descriptor before it returns.
  void run();
  // What was counted so far (safe from any thread while run() goes on).
  Report report() const;
  // Whether nothing is on its way: every rank's pipe to the broker empty, no frame in part
  // or in a queue. After every rank returned from a collective, a ring leaves nothing.
  bool settled() const;
  // Bytes read from ranks and written to them so far: a wait with no change is a standstill.
  std::int64_t moved() const;
  // Whether each of ranks 0..n-1 has more than max_queued bytes waiting for receivers, so the
  // broker reads nothing more from it: then none of them receives, and, if moved() stands
  // still, none ever will. Each rank's bytes waiting per receiver: [rank][receiver].
  bool all_blocked_sending(int n, std::vector<std::vector<std::int64_t>>& waiting_for) const;
  // The counts once nothing is on its way (settled()), or after two seconds of waiting for it.
  Report settled_report() const;
  // Queues a frame from kJudge to `rank` (e.g. "rank 2 failed: ..." for the ranks that wait).
  void inject(int rank, const std::string& payload);
  // Tells ranks 0..n-1 but `failed` that it failed, so that those that wait on it stop
  // waiting, and say why ("rank 1 failed because rank 2 failed").
  void tell_failed(int failed, int n);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Runs a broker to the end on this thread and returns its counts.
Report run(const std::vector<Link>& links, Options options = {});

}  // namespace course::broker
