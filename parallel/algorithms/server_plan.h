// server_plan.h: where a sharded parameter server keeps its shards (Li et al. 2014, BytePS,
// TensorFlow's ps tasks). The model's P parameters, flattened into one buffer in registration
// order, are cut into S contiguous *shards* (chunk_elems: the first P mod S one longer);
// shard s lives on *server* rank servers[s]. A rank *works* (computes gradients) unless it is
// a separate server. Co-located: every rank works and S of them also serve (S = N moves the
// ring's bytes, S = 1 is the star). Separate: the last S ranks only serve.
// The two halves of a step over such a plan are ProcessGroup::ps_push / ps_pull
// (algorithms/ps.cpp); the optimizer around them is ps/parameter_server.h.
// Read next: ps.cpp, then ps/parameter_server.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dplab::parallel {

struct ServerPlan {
  int64_t elems = 0;         // P: elements of the flat buffer
  std::vector<int> servers;  // servers[s]: the rank that holds shard s
  bool colocated = true;     // servers work too; else they only serve

  int count() const { return static_cast<int>(servers.size()); }  // S
  int64_t shard_elems(int s) const;
  int64_t shard_offset(int s) const;
  int shard_of(int rank) const;  // the shard `rank` serves, -1 if none
  bool is_server(int rank) const { return shard_of(rank) >= 0; }
  bool is_worker(int rank) const { return colocated || !is_server(rank); }
  int workers(int world) const;  // W: N on co-located servers, N - S on separate ones
  // Elements `rank` passes to ps_push / ps_pull: P on a worker, its shard on a separate server.
  int64_t buffer_elems(int rank) const;
  // Where shard s starts in that rank's buffer: shard_offset(s) on a worker, 0 on its server.
  int64_t local_offset(int rank, int s) const;
};

// The default placement for S servers among N ranks: co-located servers spread evenly
// (server s on rank s*N/S, so with ranks numbered node by node they land on different nodes);
// separate servers are ranks N-S .. N-1 (the workers keep ranks 0 .. W-1). Throws Error unless
// 1 <= S <= N (co-located) or 1 <= S < N (separate: at least one worker must remain), and
// S <= P (no empty shard).
ServerPlan make_server_plan(int64_t elems, int world, int servers, bool colocated);
// Throws Error naming the fault: a server rank outside [0, world), a rank serving twice, no
// server, no worker, or a negative size.
void check_server_plan(const ServerPlan& plan, int world);
// "2 co-located servers (ranks 0, 2)", for messages and reports.
std::string describe(const ServerPlan& plan);

}  // namespace dplab::parallel
