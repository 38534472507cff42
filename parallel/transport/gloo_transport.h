// gloo_transport.h: dplab's Transport over gloo's TCP wire, so ring.cpp, star.cpp and the
// other algorithms cross machines unchanged: a segment is one gloo message on the pair to
// the peer, sent from and received into gloo "unbound buffers" (memory gloo reads or fills
// when the other side is ready). Like the shm transport's kSlots slots per link, each peer
// has kGlooDepth send buffers and kGlooDepth receives posted ahead, so the next segments
// are on the wire while the algorithm reduces this one. Every wait ends within the timeout
// in a CommError naming this rank, the peer and the collective.
// Also here: how dplab makes gloo's TCP device (which interface: GLOO_SOCKET_IFNAME, else the
// one that routes to MASTER_ADDR, else loopback) and a gloo context through dplab's store;
// the gloo engine (engines/gloo_engine.cpp) uses the same two. docs/gloo.md says more.
// Read next: gloo_transport.cpp, node_transport.h (shm in a node, this across nodes).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "parallel/transport/transport.h"

namespace gloo {
class Context;
}

namespace dplab::parallel {

inline constexpr int kGlooDepth = 4;  // messages in flight per peer and direction

// The address gloo's TCP device listens on, and why: "eth1 (GLOO_SOCKET_IFNAME)",
// "10.0.0.2 (routes to MASTER_ADDR 10.0.0.1)", "127.0.0.1 (one node)".
struct GlooInterface {
  std::string iface;     // an interface name, or "" to use `hostname`
  std::string hostname;  // an address to bind
  std::string why;
};
// multi_node: the job spans machines (loopback would not reach the others).
GlooInterface gloo_interface(bool multi_node);

// A connected gloo context over all `size` ranks: every rank calls it at the same point.
// `store` is a view of the group's own ("dplab/pg3/gloo"); `timeout` becomes gloo's.
std::shared_ptr<gloo::Context> make_gloo_context(std::shared_ptr<Store> store, int rank, int size,
                                                 Seconds timeout, bool multi_node);

// The transport to the ranks in `peers` (others are refused with an Error): every rank of the
// context must call it, also one with no peers, because gloo connects all pairs.
// `status` is a store view where a failing rank files why (peers read it when their wait
// ends); segment_bytes: the largest segment (the algorithms cut buffers into these).
std::unique_ptr<Transport> make_gloo_transport(std::shared_ptr<gloo::Context> context,
                                               std::shared_ptr<Store> status,
                                               std::vector<int> peers, Seconds timeout,
                                               std::size_t segment_bytes);

// Without gloo (-Dgloo) the functions above throw; engines/collective_engine.h's gloo_built()
// says which build this is.

}  // namespace dplab::parallel
