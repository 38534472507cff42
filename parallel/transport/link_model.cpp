// link_model.cpp: the virtual clocks behind an emulated link, and PacedTransport.
// A transfer of b bytes on a link of B bytes/s that is free at time f, asked for at time t,
// runs from max(t, f) to max(t, f) + b/B. Waiting until the end charges the wall-clock time
// a real link would take, mostly asleep, as a NIC's DMA costs the CPU almost nothing.
// Read next: mailbox_transport.cpp (the transport being wrapped).
#include "parallel/transport/link_model.h"

#include <algorithm>
#include <thread>

#include "framework/error.h"

namespace dplab::parallel {

double link_bytes_per_s(double gbps) {
  DPLAB_CHECK(gbps > 0, "link bandwidth must be > 0 Gbit/s, got {}", gbps);
  return gbps * 1e9 / 8.0;
}

// Sleeping has a cost of its own: the kernel wakes a thread up to ~100 us late. A segment
// of 128 KiB takes 105 us at 10 Gbit/s, so a late wake-up per segment would slow the
// emulated link by half, and charge small messages a latency no NIC has. So: sleep until
// shortly before the end, then yield the core until the end (other ranks run meanwhile).
void sleep_on_link(LinkClock::time_point until) {
  constexpr auto kWakeUpLate = std::chrono::microseconds(100);
  if (until - LinkClock::now() > kWakeUpLate) std::this_thread::sleep_until(until - kWakeUpLate);
  while (LinkClock::now() < until) std::this_thread::yield();
}

LinkClock::time_point LinkDirection::reserve(int64_t bytes, LinkClock::time_point earliest) {
  const auto start = std::max(earliest, free_at_);
  free_at_ = start + std::chrono::duration_cast<LinkClock::duration>(
                         std::chrono::duration<double>(double(bytes) / bytes_per_s_));
  return free_at_;
}

LinkModel::LinkModel(int endpoints, double gbps)
    : gbps_(gbps), egress_(endpoints, LinkDirection(link_bytes_per_s(gbps))),
      ingress_(endpoints, LinkDirection(link_bytes_per_s(gbps))) {}

LinkClock::time_point LinkModel::book(int from, int to, int64_t bytes,
                                      LinkClock::time_point earliest) {
  DPLAB_CHECK(from >= 0 && to >= 0 && from < int(egress_.size()) && to < int(ingress_.size()),
              "LinkModel: endpoints must be in [0, {}), got {} -> {}", egress_.size(), from, to);
  if (from == to || bytes == 0) return earliest;  // no link crossed
  // Both ends are booked together: the copy starts when both are free, and ends for both.
  std::lock_guard<std::mutex> lock(mu_);
  const auto end = ingress_[to].reserve(bytes, egress_[from].reserve(0, earliest));
  egress_[from].reserve(0, end);  // egress busy until the same end
  return end;
}

void LinkModel::transfer(int from, int to, int64_t bytes) { sleep_on_link(book(from, to, bytes)); }

namespace {

// How far a sender may run ahead of its link, in segments: a NIC queues a little.
constexpr int kQueuedSegments = 2;

class PacedTransport : public Transport {
 public:
  PacedTransport(std::unique_ptr<Transport> inner, double gbps, std::function<bool(int)> across,
                 LinkObserver observe)
      : inner_(std::move(inner)), bytes_per_s_(link_bytes_per_s(gbps)), egress_(bytes_per_s_),
        ingress_(bytes_per_s_), across_(std::move(across)), observe_(std::move(observe)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  std::size_t segment_bytes() const override { return inner_->segment_bytes(); }
  void set_context(const std::string& collective) override { inner_->set_context(collective); }
  void mark_failed(const std::string& why) override { inner_->mark_failed(why); }
  void mark_left() override { inner_->mark_left(); }

  // The segment leaves once the egress link has room in its queue for it, noted with the
  // moment its bytes start down the wire.
  void send_segment(int peer, const void* src, std::size_t len) override {
    if (across_ && !across_(peer)) return inner_->send_segment(peer, src, len);  // same node
    const auto end = egress_.reserve(static_cast<int64_t>(len));
    const auto on_wire = end - wire_time(len);
    sleep_on_link(end - wire_time(kQueuedSegments * segment_bytes()));
    inner_->send_noted(peer, src, len, uint64_t(on_wire.time_since_epoch().count()));
  }

  // The segment is usable once the ingress link has carried it; the slot stays taken
  // meanwhile, so a fast sender is held back by a slow receiver, as on a wire. The ingress
  // link takes the bytes from the moment the sender put them on its wire, not from when this
  // rank looked: a NIC receives while its process waits for a core, and that wait must not
  // lengthen the wire (with more ranks than cores, or when the scheduler wakes this rank on
  // the core of the busy sender, it would, at every hand-off). A transport that carries no
  // note leaves the start at now.
  void recv_segment(int peer, const std::function<void(const void*, std::size_t)>& use) override {
    if (across_ && !across_(peer)) return inner_->recv_segment(peer, use);  // same node
    inner_->recv_segment(peer, [&](const void* data, std::size_t len) {
      const uint64_t note = inner_->received_note(peer);
      const auto on_wire = note == 0 ? LinkClock::now() : sent_at(note);
      const auto carried = ingress_.reserve(static_cast<int64_t>(len), on_wire);
      sleep_on_link(carried);
      if (observe_) observe_(LinkArrival{peer, len, on_wire, carried});
      use(data, len);
    });
  }

 private:
  static LinkClock::time_point sent_at(uint64_t note) {
    return LinkClock::time_point(LinkClock::duration(static_cast<LinkClock::rep>(note)));
  }
  LinkClock::duration wire_time(std::size_t bytes) const {
    return std::chrono::duration_cast<LinkClock::duration>(
        std::chrono::duration<double>(double(bytes) / bytes_per_s_));
  }

  std::unique_ptr<Transport> inner_;
  double bytes_per_s_;
  LinkDirection egress_, ingress_;
  std::function<bool(int)> across_;  // empty: every peer is behind the link
  LinkObserver observe_;             // empty: nobody asked
};

}  // namespace

std::unique_ptr<Transport> make_paced_transport(std::unique_ptr<Transport> inner, double gbps,
                                                std::function<bool(int peer)> across,
                                                LinkObserver observe) {
  DPLAB_CHECK(inner != nullptr, "make_paced_transport: no transport to wrap");
  return std::make_unique<PacedTransport>(std::move(inner), gbps, std::move(across),
                                          std::move(observe));
}

}  // namespace dplab::parallel
