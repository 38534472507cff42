// link_model.h: an emulated network link per rank or device, so that one machine can show
// what a cluster's links do to a parameter server.
// Over shared memory there is no per-rank link: every rank copies at memory speed through
// the same memory bus, so a star's master is not a bottleneck the way it is between
// machines, where its one NIC carries (N-1)x a worker's bytes. With a LinkModel each
// endpoint gets a full-duplex link of `gbps` gigabits per second: a transfer of b bytes
// starts once the link is free and occupies it for b / bandwidth (a virtual clock; late
// wake-ups do not accumulate, because the next transfer starts from the clock, not "now").
// Used by PacedTransport (ring and star between processes) and by DataParallel's copies.
// Read next: link_model.cpp, then transport.h.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "parallel/transport/transport.h"

namespace dplab::parallel {

using LinkClock = std::chrono::steady_clock;

// One direction of one endpoint's link.
class LinkDirection {
 public:
  explicit LinkDirection(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}
  // Books `bytes` on the link: returns when the transfer would end.
  LinkClock::time_point reserve(int64_t bytes, LinkClock::time_point earliest = LinkClock::now());

 private:
  double bytes_per_s_;
  LinkClock::time_point free_at_{};
};

// Several endpoints of one process (DataParallel's devices): a copy from a to b holds a's
// egress and b's ingress for bytes / bandwidth. Thread-safe.
class LinkModel {
 public:
  LinkModel(int endpoints, double gbps);
  // Books a copy of `bytes` from endpoint `from` to `to`, asked for at `earliest`; returns
  // when it would end (`earliest` itself when it crosses no link). Copies asked for at one
  // instant pass the same `earliest`: their ends then depend on the links alone, not on
  // when each call happened to run (tests read the model's arithmetic off them).
  LinkClock::time_point book(int from, int to, int64_t bytes,
                             LinkClock::time_point earliest = LinkClock::now());
  // book(), then sleeps until then: a synchronous copy.
  void transfer(int from, int to, int64_t bytes);
  double gbps() const { return gbps_; }

 private:
  double gbps_;
  std::mutex mu_;
  std::vector<LinkDirection> egress_, ingress_;
};

// One segment a paced receive took, on the link's virtual clock: its bytes started down the
// sender's wire at `on_wire`, and this rank's ingress had carried them at `carried`
// (on_wire + bytes / bandwidth, or later if the ingress was still busy with earlier bytes).
// It says what the link did whenever the scheduler ran either rank: tests check the model's
// arithmetic on these instead of on a wall clock.
struct LinkArrival {
  int peer = -1;
  std::size_t bytes = 0;
  LinkClock::time_point on_wire, carried;
};
using LinkObserver = std::function<void(const LinkArrival&)>;

// Wraps a transport so that this rank's sends use its egress link and its receives its
// ingress link, each at `gbps`. The sender may run ahead of its link by a couple of
// segments (what a NIC's queue holds); the receiver consumes a segment only once its
// ingress link has carried it, so the slowest end of every transfer sets the pace. Each
// segment goes with a note of when its bytes start down the sender's wire
// (Transport::send_noted), and the ingress carries them from then on, whether or not the
// receiver is looking, as a NIC fills its buffer while its process still computes.
// `across(peer)`, when given, says which peers sit behind the link: segments to and from
// the others (ranks of this rank's node, ProcessGroupOptions::ranks_per_node) go straight
// through the inner transport, at memory speed. Each rank keeps a link of its own (a NIC per
// rank, as a GPU server gives each GPU its NIC), not one shared by its node.
// `observe`, when given, hears of every segment the ingress carried, on the receiving thread.
std::unique_ptr<Transport> make_paced_transport(std::unique_ptr<Transport> inner, double gbps,
                                                std::function<bool(int peer)> across = {},
                                                LinkObserver observe = {});

// gbps in bytes per second (1 Gbit/s = 1.25e8 B/s); checks gbps > 0.
double link_bytes_per_s(double gbps);
// Waits until `until`: sleeps, then yields the core for the last 100 us (wake-ups come late).
void sleep_on_link(LinkClock::time_point until);

}  // namespace dplab::parallel
