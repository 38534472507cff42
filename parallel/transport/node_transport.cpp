// node_transport.cpp: one routing rule (same node: local, with the peer's local number;
// else remote), the calls that go to both halves (context, failure, leaving), and the hang
// report across nodes. Traffic is counted by the algorithms, per segment, whichever half
// carried it.
// Read next: gloo_transport.cpp.
#include "parallel/transport/node_transport.h"

#include <chrono>
#include <thread>

#include "framework/error.h"
#include "parallel/transport/hang_report.h"

namespace dplab::parallel {

namespace {

class NodeTransport final : public Transport {
 public:
  NodeTransport(std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote, int rank,
                int size, int ranks_per_node, std::shared_ptr<Store> status, Seconds timeout)
      : local_(std::move(local)), remote_(std::move(remote)), rank_(rank), size_(size),
        per_node_(ranks_per_node), status_(std::move(status)), timeout_(timeout),
        name_(local_->name() + "+" + remote_->name()) {
    DPLAB_CHECK(per_node_ > 0 && size_ % per_node_ == 0,
                "node transport: ranks_per_node {} must divide the world size {}", per_node_,
                size_);
    DPLAB_CHECK(local_->size() == per_node_ && local_->rank() == rank_ % per_node_,
                "node transport: the local transport is rank {} of {}, expected rank {} of {}",
                local_->rank(), local_->size(), rank_ % per_node_, per_node_);
    DPLAB_CHECK(remote_->size() == size_ && remote_->rank() == rank_,
                "node transport: the remote transport is rank {} of {}, expected rank {} of {}",
                remote_->rank(), remote_->size(), rank_, size_);
    DPLAB_CHECK(local_->segment_bytes() == remote_->segment_bytes(),
                "node transport: both halves must use one segment size, got {} (local) and {} "
                "(remote)",
                local_->segment_bytes(), remote_->segment_bytes());
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }  // "shm+gloo"
  std::size_t segment_bytes() const override { return local_->segment_bytes(); }
  void set_context(const std::string& collective) override {
    ++collectives_;
    collective_ = collective;
    local_->set_context(collective);
    remote_->set_context(collective);
  }
  void end_collective() override {
    local_->end_collective();
    remote_->end_collective();
  }

  void send_segment(int peer, const void* src, std::size_t len) override {
    const bool local = same_node(peer);
    guarded(local, [&] {
      if (local)
        local_->send_segment(peer % per_node_, src, len);
      else
        remote_->send_segment(peer, src, len);
    });
  }
  void recv_segment(int peer,
                    const std::function<void(const void* data, std::size_t len)>& use) override {
    const bool local = same_node(peer);
    guarded(local, [&] {
      if (local)
        local_->recv_segment(peer % per_node_, use);
      else
        remote_->recv_segment(peer, use);
    });
  }

  void mark_failed(const std::string& why) override {
    local_->mark_failed(why);
    remote_->mark_failed(why);
  }
  void mark_left() override {
    local_->mark_left();
    remote_->mark_left();
  }

 private:
  bool same_node(int peer) const { return peer / per_node_ == rank_ / per_node_; }

  // The local half numbers this node's ranks 0..ranks_per_node-1: its messages get the key
  // to the job's numbering in front. A timed-out wait (either half says so: "timed out",
  // "within the timeout") gets the job-wide diagnosis added; other failures (a dead peer, a
  // failed rank) pass on without it.
  template <class F>
  void guarded(bool local, F&& f) {
    try {
      f();
    } catch (const CommError& e) {
      std::string what = e.what();
      if (local) {
        const int node = rank_ / per_node_, first = node * per_node_;
        what = fmt::format("rank {} (on node {}, whose ranks {}-{} its shared-memory transport "
                           "numbers 0-{}): {}",
                           rank_, node, first, first + per_node_ - 1, per_node_ - 1, what);
      }
      const bool timed_out = what.find("timed out") != std::string::npos ||
                             what.find("within the timeout") != std::string::npos;
      if (!status_ || diagnosed_ || !timed_out) throw CommError(what);
      diagnosed_ = true;
      throw CommError(what + "; across the nodes: " + diagnose());
    }
  }

  // The watchdog's method over the store (hang_report.h): name the ranks that did
  // not file that they are stuck (stopped, dead, or busy elsewhere) and those out of step.
  std::string diagnose() {
    const Seconds grace = late_rank_grace(timeout_);
    try {
      return find_late_ranks(*status_, "stuck/", rank_, size_, collectives_, collective_, grace);
    } catch (const std::exception& e) {
      return fmt::format("the store did not answer within {:.1f} s (rank 0, its host, is stopped "
                         "or hung; {})",
                         grace.count(), e.what());
    }
  }

  std::unique_ptr<Transport> local_, remote_;
  int rank_, size_, per_node_;
  std::shared_ptr<Store> status_;
  Seconds timeout_;
  std::string name_;
  uint64_t collectives_ = 0;  // started: the current one is #collectives_
  std::string collective_ = "(no collective yet)";
  bool diagnosed_ = false;  // once: later errors of a broken group need no second report
};

}  // namespace

std::unique_ptr<Transport> make_node_transport(std::unique_ptr<Transport> local,
                                               std::unique_ptr<Transport> remote, int rank,
                                               int size, int ranks_per_node,
                                               std::shared_ptr<Store> status, Seconds timeout) {
  DPLAB_CHECK(local != nullptr && remote != nullptr, "node transport: a half is missing");
  return std::make_unique<NodeTransport>(std::move(local), std::move(remote), rank, size,
                                         ranks_per_node, std::move(status), timeout);
}

}  // namespace dplab::parallel
