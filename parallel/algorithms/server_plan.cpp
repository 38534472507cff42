// server_plan.cpp: the shard layout of server_plan.h and its checks.
// Read next: ps.cpp.
#include "parallel/algorithms/server_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "framework/error.h"
#include "parallel/algorithms/collective_types.h"

namespace dplab::parallel {

int64_t ServerPlan::shard_elems(int s) const { return chunk_elems(elems, count(), s); }
int64_t ServerPlan::shard_offset(int s) const { return chunk_offset(elems, count(), s); }

int ServerPlan::shard_of(int rank) const {
  for (int s = 0; s < count(); ++s)
    if (servers[s] == rank) return s;
  return -1;
}

int ServerPlan::workers(int world) const { return colocated ? world : world - count(); }

int64_t ServerPlan::buffer_elems(int rank) const {
  return is_worker(rank) ? elems : shard_elems(shard_of(rank));
}

int64_t ServerPlan::local_offset(int rank, int s) const {
  return is_worker(rank) ? shard_offset(s) : 0;
}

ServerPlan make_server_plan(int64_t elems, int world, int servers, bool colocated) {
  DPLAB_CHECK(world >= 1, "parameter server: expected a world of >= 1 ranks, got {}", world);
  DPLAB_CHECK(servers >= 1 && servers <= (colocated ? world : world - 1),
              "parameter server: expected 1 to {} {} servers for {} ranks, got {}{}",
              colocated ? world : world - 1, colocated ? "co-located" : "separate", world, servers,
              colocated ? "" : " (separate servers do not train: at least one rank must work)");
  // an empty shard would make a server that only relays zeros: refuse it by name
  DPLAB_CHECK(servers <= elems,
              "parameter server: expected at most {} servers for {} parameters (each server "
              "holds a shard of at least one), got {}",
              elems, elems, servers);
  ServerPlan plan{.elems = elems, .colocated = colocated};
  for (int s = 0; s < servers; ++s)
    plan.servers.push_back(colocated ? static_cast<int>(int64_t(s) * world / servers)
                                     : world - servers + s);
  check_server_plan(plan, world);
  return plan;
}

void check_server_plan(const ServerPlan& plan, int world) {
  DPLAB_CHECK(plan.elems >= 0, "parameter server: expected >= 0 elements, got {}", plan.elems);
  DPLAB_CHECK(plan.count() >= 1, "parameter server: expected at least one server, got none");
  std::set<int> seen;
  for (int s = 0; s < plan.count(); ++s) {
    const int r = plan.servers[s];
    DPLAB_CHECK(r >= 0 && r < world, "parameter server: server {} is rank {}, not in [0, {})", s, r,
                world);
    DPLAB_CHECK(seen.insert(r).second,
                "parameter server: rank {} holds two shards; each server holds one", r);
  }
  DPLAB_CHECK(plan.workers(world) >= 1,
              "parameter server: all {} ranks are separate servers: no rank computes gradients",
              world);
}

std::string describe(const ServerPlan& plan) {
  return fmt::format("{} {} server{} (rank{} {})", plan.count(),
                     plan.colocated ? "co-located" : "separate", plan.count() == 1 ? "" : "s",
                     plan.count() == 1 ? "" : "s", fmt::join(plan.servers, ", "));
}

}  // namespace dplab::parallel
