// broker_transport.h: a rank's side of the broker (broker.h): the Transport interface
// (parallel/transport/transport.h) over the two pipes to the broker. send_segment writes one
// frame [u8 destination][bytes]; recv_segment reads frames until one from the peer asked for
// arrives, keeping those of other peers for later (a rank that receives from two peers in
// turn). A frame from the judge (broker::kJudge) says a rank of this collective failed: the
// wait ends with its words. A wait ends after `wait` with the rank, the peer and the time.
// Used by hw3's ranks (worker.cpp) and by the judge's own run of the library's ring, which
// goes the same way, through pipes and a broker, so that the two are timed alike.
// Read next: broker.h, ../hw3_ring_allreduce/worker.cpp.
#pragma once
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "parallel/transport/transport.h"

namespace course::broker {

class BrokerTransport : public dplab::parallel::Transport {
 public:
  // to_broker, from_broker: this rank's ends of its two pipes (not owned).
  BrokerTransport(int to_broker, int from_broker, std::size_t segment_bytes,
                  std::chrono::duration<double> wait);

  void begin(int rank, int size);  // the place this rank takes in the next collective
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::size_t segment_bytes() const override { return segment_; }
  void set_context(const std::string& c) override { context_ = c; }
  void send_segment(int peer, const void* src, std::size_t len) override;
  void recv_segment(int peer, const std::function<void(const void*, std::size_t)>& use) override;
  void mark_failed(const std::string&) override {}  // the judge tells the others (inject)
  void mark_left() override {}

 private:
  void check_peer(int peer, const char* what) const;
  int to_, from_;
  std::size_t segment_;
  std::chrono::duration<double> wait_;
  int rank_ = 0, size_ = 1;
  std::string name_ = "broker", context_;
  // frames (source byte, then the segment) that came from a peer not yet asked for
  std::vector<std::deque<std::string>> early_;
};

}  // namespace course::broker
