// deadlock.h: who waits on whom, so that a deadlock is named the moment it forms, from the
// ranks' own calls and not from a timeout. Each rank's CountingTransport (grading.h) files
// here, under one lock, the call it is in (a send to a peer, a receive from one, or none:
// running your code) and the segments each link has carried. A send blocks while the
// link's slots are full and its receiver is not receiving from it; a receive blocks while
// the peer has posted nothing new and is not sending to it. When a rank about to wait is
// blocked on a rank that is blocked on another, and so on back to the first, no rank of
// that cycle can ever go on: only a rank outside any call (or one that will get what it
// waits for) can end a wait, and there is none in the cycle. Counts bumped only after a
// call returns lag behind the transport, but only while that very call is on the peer's
// side, which the "is not receiving from it / sending to it" clauses already cover.
// Read next: grading.h.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "diagnose.h"
#include "parallel/transport/mailbox_transport.h"

namespace hw3::grading {

class WaitGraph {
 public:
  enum class Doing { Running, Sending, Receiving };

  explicit WaitGraph(int n) : n_(n), doing_(n, Doing::Running), peer_(n, -1), posted_(n * n, 0), taken_(n * n, 0) {}

  // Rank r is about to send to (or receive from) peer: "" if it may wait, else why it would
  // wait forever (r then does not wait: it throws, and its peers stop with it).
  std::string enter(int r, Doing doing, int peer, int64_t segment_bytes) {
    if (peer < 0 || peer >= n_) return "";  // not a rank: the transport itself says so
    std::lock_guard<std::mutex> lock(mu_);
    doing_[r] = doing;
    peer_[r] = peer;
    std::vector<int> chain{r};
    for (int at = r; blocked(at);) {
      at = peer_[at];
      if (at == r) return cycle_words(chain, segment_bytes);
      for (int seen : chain)
        if (seen == at) return "";  // blocked behind a cycle its last rank has named already
      chain.push_back(at);
    }
    return "";
  }

  // Rank r's call ended; `moved` whether its segment went (or came) through.
  void leave(int r, bool moved) {
    std::lock_guard<std::mutex> lock(mu_);
    if (moved && doing_[r] == Doing::Sending) ++posted_[r * n_ + peer_[r]];
    if (moved && doing_[r] == Doing::Receiving) ++taken_[r * n_ + peer_[r]];
    doing_[r] = Doing::Running;
    peer_[r] = -1;
  }

  // After rank r's wait ran out of time (no cycle formed): what the rank it waited on was
  // doing, and the one that one waited on, and so on, in words.
  std::string why_waiting(int r) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string words;
    int at = peer_[r];
    for (int hops = 0; at >= 0 && hops < n_; ++hops) {
      if (doing_[at] == Doing::Running)
        return fmt::format("{}{}rank {} was running your code, in no send or receive, all that time (a loop that "
                           "never ends?)", words, words.empty() ? ": " : ", and ", at);
      if (!blocked(at)) break;
      words += fmt::format("{}rank {} waits {} rank {}", words.empty() ? ": " : ", ", at, doing_words(at), peer_[at]);
      at = peer_[at];
    }
    return words + (words.empty() ? ": " : "; ") + "the ranks were still moving segments, only slowly";
  }

 private:
  // Whether rank r is in a call that cannot end until peer_[r] does something first.
  bool blocked(int r) const {
    const int p = peer_[r];
    if (doing_[r] == Doing::Sending)
      return posted_[r * n_ + p] - taken_[p * n_ + r] >= static_cast<int64_t>(dplab::parallel::kSlots) &&
             !(doing_[p] == Doing::Receiving && peer_[p] == r);
    if (doing_[r] == Doing::Receiving)
      return posted_[p * n_ + r] == taken_[r * n_ + p] && !(doing_[p] == Doing::Sending && peer_[p] == r);
    return false;
  }

  const char* doing_words(int r) const {
    return doing_[r] == Doing::Sending ? "to send to" : doing_[r] == Doing::Receiving ? "for a segment from" : "on";
  }

  std::string cycle_words(const std::vector<int>& chain, int64_t segment_bytes) const {
    bool all_send = true;
    std::string loop;
    for (int r : chain) {
      all_send = all_send && doing_[r] == Doing::Sending;
      loop += fmt::format("{}rank {} waits {} rank {}", loop.empty() ? "" : ", ", r, doing_words(r), peer_[r]);
    }
    const std::string who =
        static_cast<int>(chain.size()) == n_ ? "every rank" : fmt::format("ranks {}", fmt::join(chain, ", "));
    if (all_send) {
      const int r = chain.front(), p = peer_[r];
      return fmt::format("deadlock: rank {} sent {} segments to rank {} that rank {} has not taken, so the link's {} "
                         "slots of {} are full, and it waits for a free slot that rank {} would free only by "
                         "receiving; but rank {} is itself blocked sending ({}): {} blocks on a full slot. Send and "
                         "receive segment by segment (exchange() interleaves them)", r,
                         posted_[r * n_ + p] - taken_[p * n_ + r], p, p, dplab::parallel::kSlots,
                         bytes_words(segment_bytes), p, p, loop, who);
    }
    return fmt::format("deadlock: the ranks wait on each other in a cycle ({}), and each waits for what the next one "
                       "would do only after its own wait: a receive without its matching send, or the two sides of a "
                       "link taking their sends and receives in different orders?", loop);
  }

  int n_;
  std::mutex mu_;
  std::vector<Doing> doing_;
  std::vector<int> peer_;
  std::vector<int64_t> posted_;  // [s * n + r]: segments s's sends to r put into the link
  std::vector<int64_t> taken_;   // [r * n + s]: segments r took from the link s -> r
};

}  // namespace hw3::grading
