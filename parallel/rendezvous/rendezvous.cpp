// rendezvous.cpp: how ranks find each other: rank discovery from launcher variables, the
// store for an init_method, and the check-in. Rendezvous is four store facts: rank 0
// publishes its world size; each rank claims its rank once (add("rdzv/claim/r") == 1) and,
// after agreeing with rank 0's world size, checks in ("rdzv/rank/r"); a rank that finds a
// disagreement publishes "rdzv/error" so every rank fails with the same message instead of
// waiting for ranks that will never come.
// Cost: O(world_size) small store requests per rank, polled every 20-100 ms.
// Read next: comm/init.cpp (the default group built on it), launch/supervisor.h.
#include "parallel/rendezvous/rendezvous.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "framework/error.h"
#include "parallel/rendezvous/file_store.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/tcp_store.h"

extern char** environ;

namespace dplab::parallel {

namespace {

using Env = std::map<std::string, std::string>;

const std::string* find(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

int parse_int(const std::string& name, const std::string& value) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  DPLAB_CHECK(used == value.size() && !value.empty() && v >= -1 && v <= (1L << 30),
              "{}='{}' is not an integer (expected a number set by the launcher)", name, value);
  return static_cast<int>(v);
}

int require_int(const Env& env, const std::string& name, const std::string& because) {
  const std::string* v = find(env, name);
  DPLAB_CHECK(v != nullptr, "{} is not set ({})", name, because);
  return parse_int(name, *v);
}

int optional_int(const Env& env, const std::string& name, int fallback) {
  const std::string* v = find(env, name);
  return v ? parse_int(name, *v) : fallback;
}

// SLURM_TASKS_PER_NODE looks like "2(x3),1": three nodes with 2 tasks, then one with 1.
int slurm_tasks_on_node(const std::string& spec, int node) {
  int index = 0;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t paren = item.find("(x");
    int tasks = parse_int("SLURM_TASKS_PER_NODE", item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      DPLAB_CHECK(item.back() == ')', "SLURM_TASKS_PER_NODE='{}' is malformed", spec);
      repeat = parse_int("SLURM_TASKS_PER_NODE", item.substr(paren + 2, item.size() - paren - 3));
    }
    if (node < index + repeat) return tasks;
    index += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  DPLAB_FAIL("SLURM_TASKS_PER_NODE='{}' lists {} nodes, but SLURM_NODEID is {}", spec, index, node);
}

Env process_env() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    if (auto eq = kv.find('='); eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

void master_from_env(const Env& env, RankInfo& info) {
  if (const std::string* a = find(env, "MASTER_ADDR")) {
    DPLAB_CHECK(!a->empty(), "MASTER_ADDR is set but empty (expected a host name or address)");
    info.master_addr = *a;
  }
  info.master_port = optional_int(env, "MASTER_PORT", info.master_port);
  DPLAB_CHECK(info.master_port > 0 && info.master_port <= 65535,
              "MASTER_PORT={} is not a port (expected 1..65535)", info.master_port);
}

// The launchers whose variables say which rank a process is, in the order they are tried
// (torchrun's win when it runs under srun). A launcher is recognised by its rank variable
// (torchrun's also by WORLD_SIZE alone, so that a half-set environment names the missing
// variable); it sets the rank and the world size together; the local rank and the local
// world size, when absent, are those of one node. Slurm has no local world size variable:
// SLURM_TASKS_PER_NODE lists the tasks of every node (nullptr below).
struct LauncherVariables {
  const char* launcher;  // who sets them, as the error messages name it
  const char* rank;
  const char* world_size;
  bool world_size_alone_counts;
  const char* local_rank;
  const char* local_world_size;
};
// clang-format off
constexpr LauncherVariables kLaunchers[] = {
    // launcher                           rank                    world size              alone  local rank                    local world size
    {"torchrun-style launch: dplab-run", "RANK",                 "WORLD_SIZE",           true,  "LOCAL_RANK",                 "LOCAL_WORLD_SIZE"},
    {"mpirun",                           "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", false, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"srun",                             "SLURM_PROCID",         "SLURM_NTASKS",         false, "SLURM_LOCALID",              nullptr},
};
// clang-format on

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

RankInfo rank_info_from_env(const Env& env) {
  const LauncherVariables* launcher = nullptr;
  for (const LauncherVariables& l : kLaunchers)
    if (find(env, l.rank) || (l.world_size_alone_counts && find(env, l.world_size))) {
      launcher = &l;
      break;
    }
  if (launcher == nullptr) {
    DPLAB_FAIL("no rank information in the environment: expected RANK and WORLD_SIZE (set by "
               "dplab-run or torchrun), OMPI_COMM_WORLD_RANK (mpirun) or SLURM_PROCID (srun); "
               "or pass rank and world_size explicitly");
  }
  const std::string why = fmt::format("{} sets {} and {} together", launcher->launcher,
                                      launcher->rank, launcher->world_size);
  RankInfo info;
  info.rank = require_int(env, launcher->rank, why);
  info.world_size = require_int(env, launcher->world_size, why);
  info.local_rank = optional_int(env, launcher->local_rank, info.rank);
  if (launcher->local_world_size != nullptr) {
    info.local_world_size = optional_int(env, launcher->local_world_size, info.world_size);
  } else {  // Slurm: the tasks of this node, from the per-node list
    const std::string* per_node = find(env, "SLURM_TASKS_PER_NODE");
    info.local_world_size =
        per_node ? slurm_tasks_on_node(*per_node, optional_int(env, "SLURM_NODEID", 0))
                 : info.world_size;
  }
  DPLAB_CHECK(info.world_size >= 1, "world size must be >= 1, got {}", info.world_size);
  DPLAB_CHECK(info.rank >= 0 && info.rank < info.world_size,
              "rank {} is not in [0, {}): RANK must be below WORLD_SIZE", info.rank,
              info.world_size);
  DPLAB_CHECK(info.local_world_size >= 1 && info.local_world_size <= info.world_size,
              "local world size {} is not in [1, world size {}]", info.local_world_size,
              info.world_size);
  DPLAB_CHECK(info.local_rank >= 0 && info.local_rank < info.local_world_size,
              "local rank {} is not in [0, local world size {})", info.local_rank,
              info.local_world_size);
  master_from_env(env, info);
  return info;
}

RankInfo rank_info_from_env() { return rank_info_from_env(process_env()); }

std::shared_ptr<Store> make_store(const std::string& init_method, int rank, int world_size,
                                  Seconds timeout) {
  const std::string file_prefix = "file://", tcp_prefix = "tcp://";
  if (init_method.rfind(file_prefix, 0) == 0) {
    return std::make_shared<FileStore>(init_method.substr(file_prefix.size()), world_size, timeout);
  }
  RankInfo where;
  if (init_method == "env://") {
    master_from_env(process_env(), where);
  } else if (init_method.rfind(tcp_prefix, 0) == 0) {
    std::string hostport = init_method.substr(tcp_prefix.size());
    size_t colon = hostport.rfind(':');
    DPLAB_CHECK(colon != std::string::npos && colon > 0,
                "init_method '{}': expected tcp://host:port", init_method);
    where.master_addr = hostport.substr(0, colon);
    where.master_port = parse_int("port in " + init_method, hostport.substr(colon + 1));
    DPLAB_CHECK(where.master_port > 0 && where.master_port <= 65535,
                "init_method '{}': port must be in 1..65535", init_method);
  } else {
    DPLAB_FAIL("init_method '{}' not understood: expected env://, tcp://host:port or file:///path",
               init_method);
  }
  return std::make_shared<TCPStore>(where.master_addr, where.master_port, rank == 0, timeout,
                                    job_token_from_env());
}

void rendezvous(Store& store, int rank, int world_size, Seconds timeout) {
  using Clock = std::chrono::steady_clock;
  // Every failure goes through here. The first rank to fail publishes its message, so all
  // ranks report the cause. Rank 0 hosts the store: before it throws (closing the server),
  // it gives the ranks that are present up to 1 s to read the message, or they would only
  // see "the store server closed the connection".
  auto fail = [&](const std::string& msg, bool publish) {
    try {
      if (publish) store.set("rdzv/error", msg);
      if (rank != 0) {
        store.add("rdzv/error_seen", 1);
      } else {
        int present = 0;
        for (int r = 1; r < world_size; ++r)
          present += store.check({"rdzv/claim/" + std::to_string(r)});
        auto until = Clock::now() + std::chrono::seconds(1);
        while (store.add("rdzv/error_seen", 0) < present && Clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const CommError&) {
      // The store itself is gone; the message we have is still the best one to give.
    }
    throw CommError(msg);
  };
  if (store.add("rdzv/claim/" + std::to_string(rank), 1) != 1) {
    fail(fmt::format("rendezvous: two processes claim rank {}; each rank must be started once "
                     "(are two jobs sharing MASTER_PORT?)",
                     rank),
         true);
  }
  if (rank == 0) store.set("rdzv/world_size", std::to_string(world_size));

  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("rdzv/rank/" + std::to_string(r));
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  auto pause = std::chrono::milliseconds(20);
  bool size_checked = false;
  for (;;) {
    if (store.check({"rdzv/error"})) fail(store.get("rdzv/error"), false);
    if (!size_checked && store.check({"rdzv/world_size"})) {
      std::string theirs = store.get("rdzv/world_size");
      if (theirs != std::to_string(world_size)) {
        fail(fmt::format("rendezvous: ranks disagree on the world size: rank 0 has WORLD_SIZE={}, "
                         "rank {} has WORLD_SIZE={}",
                         theirs, rank, world_size),
             true);
      }
      size_checked = true;
      // Check in only after agreeing with rank 0: then rank 0 cannot finish with a rank
      // that is about to report a disagreement.
      store.set(keys[rank], std::to_string(world_size));
    }
    if (size_checked && store.check(keys)) return;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r)
    if (!store.check({keys[r]})) missing.push_back(r);
  fail(fmt::format("rendezvous: rank {} waited {:.1f} s for {} ranks; rank(s) {} never checked "
                   "in (did they start, with the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE?)",
                   rank, timeout.count(), world_size, rank_list(missing)),
       !store.check({"rdzv/error"}));
}

}  // namespace dplab::parallel
