// node_transport.h: the transport of a job that spans machines. Ranks sit on nodes the
// torchrun way (node k holds ranks [k * ranks_per_node, (k + 1) * ranks_per_node)); a segment
// to a rank of this node goes through shared memory (shm_transport.h, or the thread
// transport in tests), a segment to a rank of another node over gloo's TCP wire
// (gloo_transport.h). The algorithms above see one Transport and do not know which: the ring
// of ring.cpp is the ring that crosses the network. Both halves use one segment size.
// A wait that times out in either half names the rank that stopped, the way the mpi engine's
// watchdog does (collective_watchdog.h): each rank whose wait timed out files its collective
// in the store; after a grace period the ranks that filed nothing are the late ones.
// Read next: node_transport.cpp; engines/make_engine.cpp builds it.
#pragma once
#include <memory>

#include "parallel/transport/transport.h"

namespace dplab::parallel {

// local: the transport among this node's ranks, numbered 0..ranks_per_node-1;
// remote: the transport to the other nodes' ranks, numbered as in the job (0..size-1);
// status: a store view of the group's for the hang reports ("stuck/<rank>"); timeout: the
// group's (the grace period follows from it).
std::unique_ptr<Transport> make_node_transport(std::unique_ptr<Transport> local,
                                               std::unique_ptr<Transport> remote, int rank,
                                               int size, int ranks_per_node,
                                               std::shared_ptr<Store> status, Seconds timeout);

}  // namespace dplab::parallel
