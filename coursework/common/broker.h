// broker.h: the only link between the ranks of an assignment judged outside the student's
// process (#45 item 2; meant for hw3, not yet used by it). Each rank is a process of its
// own with two pipes, both to the broker, which the judge owns; the broker forwards what a
// rank sends to the rank it names and counts every byte where no rank can change the count.
//   to the broker   = frame of [u8 destination rank][payload]
//   from the broker = frame of [u8 source rank][payload]
// Frames are common/wire.h's ([u32 length][bytes], at most kMaxFrame). The broker never
// blocks on one rank: it reads whatever any rank has written and writes to a rank only what
// its pipe takes (queues between), so two ranks that send to each other at once cannot
// stall it. A rank that names no rank (or itself), writes a frame past the cap, or closes
// in the middle of one is reported by number; the others keep running to the end.
// Cost: every byte crosses two pipes (rank -> broker -> rank) and is counted once, as sent.
// Read next: wire.h, ../tests/test_broker.cpp.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace course::broker {

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

// Forwards frames between links.size() ranks (at most 255) until every rank has closed
// the pipe it sends on and every queued frame has been delivered or its rank is gone.
// Closes every descriptor of `links` before it returns.
Report run(const std::vector<Link>& links);

}  // namespace course::broker
