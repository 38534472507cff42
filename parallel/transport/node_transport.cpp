// node_transport.cpp: one routing rule (same node: local, with the peer's local number;
// else remote) and the calls that go to both halves (context, failure, leaving).
// Traffic is counted by the algorithms, per segment, whichever half carried it.
// Read next: gloo_transport.cpp.
#include "parallel/transport/node_transport.h"

#include "framework/error.h"

namespace dplab::parallel {

namespace {

class NodeTransport final : public Transport {
 public:
  NodeTransport(std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote, int rank,
                int size, int ranks_per_node)
      : local_(std::move(local)), remote_(std::move(remote)), rank_(rank), size_(size),
        per_node_(ranks_per_node), name_(local_->name() + "+" + remote_->name()) {
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
    local_->set_context(collective);
    remote_->set_context(collective);
  }
  void end_collective() override {
    local_->end_collective();
    remote_->end_collective();
  }

  void send_segment(int peer, const void* src, std::size_t len) override {
    if (same_node(peer))
      local_->send_segment(peer % per_node_, src, len);
    else
      remote_->send_segment(peer, src, len);
  }
  void recv_segment(int peer,
                    const std::function<void(const void* data, std::size_t len)>& use) override {
    if (same_node(peer))
      local_->recv_segment(peer % per_node_, use);
    else
      remote_->recv_segment(peer, use);
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

  std::unique_ptr<Transport> local_, remote_;
  int rank_, size_, per_node_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Transport> make_node_transport(std::unique_ptr<Transport> local,
                                               std::unique_ptr<Transport> remote, int rank,
                                               int size, int ranks_per_node) {
  DPLAB_CHECK(local != nullptr && remote != nullptr, "node transport: a half is missing");
  return std::make_unique<NodeTransport>(std::move(local), std::move(remote), rank, size,
                                         ranks_per_node);
}

}  // namespace dplab::parallel
