// hang_report.h: when a wait times out, say which rank stopped making progress, the way
// NCCL's watchdog reports a desync ("rank 0 is at all_reduce #57; ranks 1-3 are at #58").
// Every rank files, in the shared mailbox block, how many collectives it has started, the
// name of the current one and the peer it is waiting on (mailbox_transport.h). The rank
// that times out reads all of them and follows the waits: rank 2 waits on 1, 1 waits on 0,
// 0 waits on nobody (or its process is stopped, or its wait stopped waking up), so rank 0
// is the one that stopped, not the neighbour that timed out.
// Where the ranks share no memory (the mpi and gloo engines' watchdog, the node transport
// across nodes), find_late_ranks does the same through the rendezvous store.
// Read next: mailbox_transport.cpp, which fills the snapshots and calls describe_hang().
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

// One rank as the waiting rank sees it when its wait times out.
struct RankProgress {
  uint64_t collectives = 0;  // collectives started (the current one is #collectives)
  std::string collective;    // name of the current (or last) one, e.g. "all_reduce(ring)"
  int waiting_on = -1;       // the peer it waits on, -1 while it is not waiting
  char process_state = 'R';  // as /proc/<pid>/stat: R, S, T (stopped), Z; '?' unknown
  double silent_s = 0;       // since its wait last woke up (a waiting rank wakes every few ms)
};

// A waiting rank that has not woken for this long is not running (stopped, or starved).
inline constexpr double kSilentAfterSeconds = 1.0;

// The diagnosis rank `me` prints after waiting on `peer` in vain: the rank that stopped
// making progress (the end of the chain of waits), its state, who waits on whom, and the
// ranks that are a collective behind the others, if any.
std::string describe_hang(int me, int peer, const std::vector<RankProgress>& ranks);

// "rank 0 is at all_reduce(ring) #57; ranks 1-3 are at all_reduce(ring) #58" over the
// ranks given (rank, progress); "" when they all are at the same collective.
std::string describe_out_of_step(const std::vector<std::pair<int, RankProgress>>& ranks);

// The state letter of process pid from /proc/<pid>/stat ('T': stopped, 'Z': zombie), or
// 'X' if it does not exist, '?' if /proc cannot tell.
char process_state(int32_t pid);

// "1-3", "0, 2": a sorted list of ranks, runs of consecutive ranks folded.
std::string rank_ranges(const std::vector<int>& ranks);

// Through the store, for ranks that share no memory: every rank whose wait timed out files
// "<number> <collective>" under key_prefix + rank, then gives the others `grace` to file
// theirs. A rank that files nothing is not stuck in a collective (stopped, dead, or busy
// elsewhere): "rank 2 stopped making progress: ..."; ranks that filed an older number are
// behind (describe_out_of_step). Throws what the store throws: a store that does not answer
// means its host, rank 0, stopped.
std::string find_late_ranks(Store& store, const std::string& key_prefix, int rank, int size,
                            uint64_t number, const std::string& collective, Seconds grace);
// How long find_late_ranks waits for the others' reports after a timeout of `timeout`.
Seconds late_rank_grace(Seconds timeout);

}  // namespace dplab::parallel
