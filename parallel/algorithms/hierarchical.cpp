/*
 * hierarchical.cpp: the two-level all-reduce (Horovod's hierarchical all-reduce, NCCL's
 * rings between NVLink islands), built of ring.cpp's pieces run on sub-rings.
 *
 * K nodes of L ranks; rank r is *local rank* l on node k. Inside a node the ranks share fast
 * links (shared memory, NVLink); between nodes every byte crosses a slower NIC. So:
 *   1. reduce-scatter inside each node: the buffer is cut into L *shards* (chunk_elems);
 *      after L-1 ring steps local rank l holds shard l reduced over its node;
 *   2. all-reduce across the nodes: the K ranks with local rank l (one per node) form a ring
 *      of their own and all-reduce shard l; L such rings run at once, one per local rank;
 *   3. all-gather inside each node: L-1 ring steps hand every rank every reduced shard.
 * A *sub-ring* is some ranks of the transport seen as a transport of their own
 * (SubTransport below): ring_reduce_scatter and ring_all_reduce run on it unchanged.
 *
 * Cost, per rank, S bytes (cost.cpp: hierarchical_all_reduce_cost, exact for any S):
 *   inside the node  2(L-1)/L·S, as a ring of L;
 *   across nodes     2(K-1)/K·S/L: the ring of K on one shard of S/L. A node's L ranks
 *                    together put 2(K-1)/K·S through its link: the node's data, as if the
 *                    node were one rank of a ring of K (the flat ring puts 2(N-1)/N·S
 *                    through each node boundary, but every byte of it from one rank).
 *   steps            2(L-1) + 2(K-1), against the flat ring's 2(KL-1).
 * The total, 2(L-1)/L·S + 2(K-1)/(KL)·S = 2(N-1)/N·S, is the ring's: hierarchical moves no
 * fewer bytes, it moves fewer of them over the slow links in fewer steps. With L = 1 or
 * K = 1 it is the ring.
 * Read next: cost.h (the two-level model auto weighs it with), star.cpp.
 */
#include <algorithm>
#include <map>

#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

namespace {

// Ranks members[0..m) of `base` as a transport of m ranks: rank i here is members[i] there.
// Segments go over the base's links, so its timeouts and hang reports (which name base
// ranks) hold; the engine begins and ends the collective on the base.
class SubTransport final : public Transport {
 public:
  SubTransport(Transport& base, std::vector<int> members)
      : base_(base), members_(std::move(members)) {
    auto me = std::find(members_.begin(), members_.end(), base_.rank());
    DPLAB_CHECK(me != members_.end(), "sub-ring: rank {} is not one of its members", base_.rank());
    rank_ = int(me - members_.begin());
  }
  int rank() const override { return rank_; }
  int size() const override { return int(members_.size()); }
  const std::string& name() const override { return base_.name(); }
  std::size_t segment_bytes() const override { return base_.segment_bytes(); }
  void set_context(const std::string&) override {}  // the base's context names the call
  void send_segment(int peer, const void* src, std::size_t len) override {
    base_.send_segment(members_[peer], src, len);
  }
  void recv_segment(int peer, const std::function<void(const void*, std::size_t)>& use) override {
    base_.recv_segment(members_[peer], use);
  }
  void mark_failed(const std::string& why) override { base_.mark_failed(why); }
  void mark_left() override { base_.mark_left(); }

 private:
  Transport& base_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace

void hierarchical_all_reduce(Exchange& ex, Block buffer) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  if (n == 1 || buffer.elems == 0) return;
  if (ex.node_of.empty()) return ring_all_reduce(ex, buffer);  // one node: the ring
  DPLAB_CHECK(int(ex.node_of.size()) == n,
              "hierarchical all-reduce: expected the node of each of {} ranks, got {}", n,
              ex.node_of.size());
  // the ranks of each node, in rank order (node ids in ascending order)
  std::map<int, std::vector<int>> nodes;
  for (int i = 0; i < n; ++i) nodes[ex.node_of[i]].push_back(i);
  const int k_nodes = int(nodes.size());
  const std::vector<int>& mine = nodes.at(ex.node_of[r]);
  const int per_node = int(mine.size());
  for (const auto& [node, ranks] : nodes)
    DPLAB_CHECK(int(ranks.size()) == per_node,
                "hierarchical all-reduce: every node must hold as many ranks; node {} holds {} "
                "and node {} holds {}",
                ex.node_of[r], per_node, node, ranks.size());
  if (k_nodes == 1) return ring_all_reduce(ex, buffer);
  const int local = int(std::find(mine.begin(), mine.end(), r) - mine.begin());
  // across: the ranks of local rank `local`, one per node, in node order
  std::vector<int> across, across_nodes;
  for (const auto& [node, ranks] : nodes) {
    across.push_back(ranks[local]);
    across_nodes.push_back(node);
  }
  const std::vector<int> same_node(per_node, ex.node_of[r]);

  SubTransport node_tr(ex.tr, mine), across_tr(ex.tr, across);
  Exchange node_ex{node_tr, ex.dtype, ex.op, ex.traffic, ex.device, same_node};
  Exchange across_ex{across_tr, ex.dtype, ex.op, ex.traffic, ex.device, across_nodes};
  std::vector<Block> shards(per_node);
  for (int i = 0; i < per_node; ++i)
    shards[i] = {buffer.data + chunk_offset(buffer.elems, per_node, i) * ex.elem(),
                 chunk_elems(buffer.elems, per_node, i)};
  ring_reduce_scatter(node_ex, shards, -1);   // 1. local rank l holds shard l, node-reduced
  ring_all_reduce(across_ex, shards[local]);  // 2. ... reduced over every node
  ring_all_gather(node_ex, shards, -1);       // 3. every rank holds every reduced shard
}

}  // namespace dplab::parallel
