// make_engine.h: which engine a process group runs on, and the data plane under it. As in
// gloo, where the caller that owns the algorithms picks the device and hands it to the
// rendezvous (connectFullMesh(store, device)), the engines build their own transports:
// ProcessGroup (comm/) names an engine and its options, make_engine turns them into one
// CollectiveEngine, and comm/ never sees a transport.
// EngineOptions are the options a process group is made with (comm/process_group.h calls
// them ProcessGroupOptions).
// Read next: make_engine.cpp (the choice), collective_engine.h (what comes back).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

class CollectiveEngine;  // collective_engine.h: comm/'s headers need only this name

struct EngineOptions {
  // The engine that runs the collectives (torch.distributed's "backend"; dplab keeps that word
  // for the compute Backend). dplab's engine over shm on one node, named by the all_reduce
  // algorithm it uses unless a call names another: "ring", "star", "recursive_doubling",
  // "halving_doubling", "one_shot", "hierarchical" (two levels: inside the nodes of
  // ranks_per_node, then across them), or "auto" (per call, the fastest by
  // algorithms/cost.h's model for the size and the nodes; the other collectives are the same
  // on all seven); "mpi", "nccl" or "gloo": an existing library's engine, any number of nodes
  // (it picks its own algorithms). With gloo built, dplab's seven also span nodes (shm in a
  // node, gloo's wire across: ranks_per_node below; docs/gloo.md)
  std::string engine = "ring";
  Seconds timeout = kDefaultTimeout;  // every wait ends in CommError after this
  // > 0: emulate a link of this many Gbit/s per rank (link_model.h); with ranks_per_node,
  // only between nodes (ranks of one node reach each other at memory speed)
  double link_gbps = 0;
  // Bytes of one transport slot, the unit of every hand-off (a multiple of 8); 0: the
  // transport's default (shm: shm_segment_bytes(N), threads: kSegmentBytes, 128 KiB).
  std::size_t segment_bytes = 0;
  // How the ranks sit on machines, torchrun's way: node k holds ranks [k * ranks_per_node,
  // (k + 1) * ranks_per_node). 0: every rank on one node. init_process_group fills it from
  // LOCAL_WORLD_SIZE; tests set it to pretend a one-machine job has several nodes.
  int ranks_per_node = 0;
  // true: the nodes are pretend, on one machine (tests, benchmarks of the two-level
  // algorithms): their ranks still reach each other through shared memory. false: between
  // nodes, gloo's wire (docs/gloo.md).
  bool nodes_share_memory = false;
};

// The engines make_engine knows: dplab's, by their all_reduce algorithm ("ring", "star",
// "recursive_doubling", "halving_doubling", "one_shot", "hierarchical", "auto"), and the
// external ones, which move their bytes themselves: "mpi", "nccl", "gloo".
bool is_known_engine(const std::string& engine);
bool is_external_engine(const std::string& engine);

// The engine `opts` names, for `rank` of `world_size`, meeting the other ranks through
// `group_prefix`'s view of `store` ("dplab/pg<k>": the group's own keys; every part of the
// engine takes a view below it). `store` itself is needed too: a HashStore means the ranks
// are threads of one process (the thread transport, else shm), and the mpi and gloo
// watchdogs open a second connection to a TCP store. Every rank calls it at the same point.
// dplab's engines get, besides their CPU transport: the emulated link when link_gbps > 0,
// the node transport (shm or threads in a node, gloo's TCP wire between) when ranks_per_node
// spans several nodes that do not share memory, and, with CUDA compiled, the cuda_ipc
// transport's factory. Options it cannot honour are refused with an Error naming the option
// (an unknown engine, a link under an external engine, a slot that is not a multiple of 8,
// nodes that do not divide world_size, nodes apart in a build without gloo).
std::unique_ptr<CollectiveEngine> make_engine(std::shared_ptr<Store> store,
                                              const std::string& group_prefix, int rank,
                                              int world_size, const EngineOptions& opts);

}  // namespace dplab::parallel
