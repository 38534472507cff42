// node_watch.h: how the dplab-run of one node learns that another node's job went wrong, as
// torchrun's agents do through their rendezvous. Each node's launcher opens its own
// connection to the job's store (rank 0 hosts it at MASTER_ADDR:MASTER_PORT; the launcher
// proves the job token like a rank) and, every 0.25 s, bumps its heartbeat
// "dplab-run/alive/<node>" and reads the others'. A node whose heartbeat stands still for
// `silence` while the store answers lost its launcher (kill -9, its machine went down), and
// its ranks died with it (the parent-death signal). A launcher whose rank failed files the
// failure under "dplab-run/failed/<node>" before stopping its ranks, and one whose ranks all
// ended well files "dplab-run/done/<node>"; the first failure seen stops the other nodes.
// While the store cannot be reached (rank 0 not serving yet, or gone) the watch says
// nothing: the ranks' own timeouts then decide.
// Read next: node_watch.cpp; exe/dplab_run.cpp uses it through SuperviseOptions.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

class NodeWatch {
 public:
  NodeWatch(std::string host, int port, std::string token, int nnodes, int node_rank,
            Seconds silence);
  ~NodeWatch();  // stops the watching thread
  NodeWatch(const NodeWatch&) = delete;
  NodeWatch& operator=(const NodeWatch&) = delete;

  // The first failure seen on another node ("node 1: rank 2 (pid 77) was killed by signal
  // 9 (Killed)", "node 1: its dplab-run stopped ..."), or nothing.
  std::optional<std::string> remote_failure() const;
  // Files this node's failure for the others (within about a second; best effort).
  void report_failure(const std::string& what);
  // Files that this node's ranks all ended well, so its silence is not a failure.
  void report_done();

 private:
  void run();
  bool connect();
  void file(const std::string& key, const std::string& value);

  const std::string host_, token_;
  const int port_, nnodes_, node_rank_;
  const Seconds silence_;
  std::atomic<bool> stop_{false};
  std::mutex store_mu_;  // the thread and report_*() share the connection
  std::shared_ptr<Store> store_;
  mutable std::mutex failure_mu_;  // separate: the supervisor polls it every 50 ms
  std::optional<std::string> failure_;
  std::thread thread_;
};

}  // namespace dplab::parallel
