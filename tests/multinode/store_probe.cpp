// store_probe.cpp: a rank that needs no collective, for the launcher's cross-node tests
// (launch_test.sh). It meets the other ranks through the job's store (env://: rank 0 hosts
// it on MASTER_ADDR), writes its pid to DIR/rank<R>.pid, then makes one store round trip
// every 20 ms for SECONDS seconds and prints how many it made. Any store error ends it
// with status 1 and the error's message.
//   store_probe SECONDS DIR
// Read next: launch_test.sh.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

#include "framework/error.h"
#include "parallel/rendezvous/rendezvous.h"

using namespace dplab::parallel;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: store_probe SECONDS DIR\n");
    return 2;
  }
  const double seconds = std::stod(argv[1]);
  try {
    const RankInfo info = rank_info_from_env();
    const Seconds timeout{20.0};
    auto store = make_store("env://", info.rank, info.world_size, timeout);
    rendezvous(*store, info.rank, info.world_size, timeout);
    std::ofstream(std::string(argv[2]) + "/rank" + std::to_string(info.rank) + ".pid")
        << ::getpid() << "\n";
    std::printf("rank %d of %d met the others through the store at %s:%d\n", info.rank,
                info.world_size, info.master_addr.c_str(), info.master_port);
    std::fflush(stdout);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int64_t trips = 0;
    while (std::chrono::steady_clock::now() < end) {
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
