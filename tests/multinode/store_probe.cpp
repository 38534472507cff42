// store_probe.cpp: a rank that needs no collective, for the launcher's cross-node tests
// (launch_test.sh). It meets the other ranks through the job's store (env://: rank 0 hosts
// it on MASTER_ADDR), waits until every node's dplab-run watches the others (below), writes
// its pid to DIR/rank<R>.pid, then makes one store round trip every 20 ms until the test
// creates DIR/stop (the namespaces share the file system), and prints how many it made.
// MAX_SECONDS only guards against a test that never says stop. Any store error ends it with
// status 1 and the error's message.
//   store_probe MAX_SECONDS DIR
// The wait for the watch is an event, not a pause: each launcher bumps its heartbeat
// "dplab-run/alive/<node>" in this store and then reads the others' (parallel/launch/
// node_watch.h). Once every heartbeat has been seen, a launcher whose own count then rises
// twice has read all the others' afterwards, so it knows every node is alive, and its
// connection is up to file a failure: a rank or launcher the test kills next is noticed.
// Read next: launch_test.sh.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

#include "framework/error.h"
#include "parallel/rendezvous/rendezvous.h"

using namespace dplab::parallel;
using Clock = std::chrono::steady_clock;

namespace {

std::string heartbeat(int node) { return "dplab-run/alive/" + std::to_string(node); }

// Blocks until every node's launcher has read every other's heartbeat at least once.
void wait_for_the_launchers_watch(Store& store, int nnodes, Clock::time_point give_up) {
  auto beats = [&] {
    std::vector<int64_t> b;
    for (int n = 0; n < nnodes; ++n) b.push_back(store.add(heartbeat(n), 0));
    return b;
  };
  auto wait_until = [&](auto&& done, const char* what) {
    for (std::vector<int64_t> b = beats(); !done(b); b = beats()) {
      if (Clock::now() > give_up) {
        std::string counts;
        for (int64_t x : b) counts += " " + std::to_string(x);
        DPLAB_FAIL("the launchers' heartbeats ({}) never {}: counts per node:{}", heartbeat(0), what, counts);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  std::vector<int64_t> base;
  wait_until([&](const std::vector<int64_t>& b) {
    for (int64_t x : b) if (x == 0) return false;
    base = b;
    return true;
  }, "all started");
  wait_until([&](const std::vector<int64_t>& b) {
    for (int n = 0; n < nnodes; ++n) if (b[n] < base[n] + 2) return false;
    return true;
  }, "rose twice more");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: store_probe MAX_SECONDS DIR\n");
    return 2;
  }
  const double max_seconds = std::stod(argv[1]);
  const std::string dir = argv[2];
  try {
    const RankInfo info = rank_info_from_env();
    const Seconds timeout{20.0};
    const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(max_seconds));
    auto store = make_store("env://", info.rank, info.world_size, timeout);
    rendezvous(*store, info.rank, info.world_size, timeout);
    const char* nnodes = std::getenv("GROUP_WORLD_SIZE");  // set by dplab-run
    if (nnodes && std::atoi(nnodes) > 1) wait_for_the_launchers_watch(*store, std::atoi(nnodes), give_up);
    std::ofstream(dir + "/rank" + std::to_string(info.rank) + ".pid") << ::getpid() << "\n";
    std::printf("rank %d of %d met the others through the store at %s:%d\n", info.rank,
                info.world_size, info.master_addr.c_str(), info.master_port);
    std::fflush(stdout);
    int64_t trips = 0;
    while (!std::filesystem::exists(dir + "/stop") && Clock::now() < give_up) {
      store->add("probe/trips/" + std::to_string(info.rank), 1);
      ++trips;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // rank 0 hosts the store: it stays until every rank made its last trip
    store->set("probe/done/" + std::to_string(info.rank), "1");
    if (info.rank == 0) {
      std::vector<std::string> all;
      for (int r = 0; r < info.world_size; ++r) all.push_back("probe/done/" + std::to_string(r));
      store->wait(all);
    }
    std::printf("rank %d made %lld store round trips\n", info.rank, static_cast<long long>(trips));
    return 0;
  } catch (const dplab::Error& e) {
    std::fprintf(stderr, "store_probe: %s\n", e.what());
    return 1;
  }
}
