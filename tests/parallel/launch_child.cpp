// launch_child.cpp: the program test_launch.cpp starts under dplab-run. One mode per test:
//   print                 print this rank's launcher variables
//   fail RANK CODE        rank RANK exits with CODE after 0.3 s; the others print "rank R
//                         sleeps" (the test's sign that they are up), then sleep 60 s
//   stubborn RANK CODE    like fail, but the others ignore SIGTERM (only SIGKILL stops them)
//   lines                 two stdout lines (the second without a newline) and one stderr line
//   rendezvous            meet through the TCPStore at MASTER_ADDR:MASTER_PORT, exchange
//                         values through the store, print the sum of all ranks' values
//   wrong-world           like rendezvous, but the last rank believes WORLD_SIZE is one more
//   init METHOD [BACKEND] init_process_group(init_method = METHOD), all_reduce(rank + 1)
//   mpi-early-exit        (under mpirun) rank 1 returns 1 at once, rank 0 waits in all_reduce
// Read next: test_launch.cpp.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/comm/init.h"

namespace par = dplab::parallel;

static std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

static int store_exchange(bool lie_about_world) {
  par::RankInfo info = par::rank_info_from_env();
  int world = info.world_size;
  if (lie_about_world && info.rank == info.world_size - 1) world += 1;
  // 30 s: long enough for the last rank to start on a loaded machine; a world-size lie is
  // found as soon as both sides are there, without waiting for it
  auto store = par::make_store("env://", info.rank, world, par::Seconds(30.0));
  par::rendezvous(*store, info.rank, world, par::Seconds(30.0));
  store->set("value/" + std::to_string(info.rank), std::to_string(10 * (info.rank + 1)));
  int64_t sum = 0;
  for (int r = 0; r < world; ++r) sum += std::stoll(store->get("value/" + std::to_string(r)));
  std::printf("rank %d sum %lld\n", info.rank, static_cast<long long>(sum));
  std::fflush(stdout);
  // Rank 0 hosts the store: it leaves only after everyone has read.
  store->add("done", 1);
  if (info.rank == 0) {
    std::vector<std::string> keys;
    for (int r = 1; r < world; ++r) keys.push_back("bye/" + std::to_string(r));
    store->wait(keys);
  } else {
    store->set("bye/" + std::to_string(info.rank), "1");
  }
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "print";
  try {
    if (mode == "print") {
      std::printf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s MASTER_ADDR=%s "
                  "MASTER_PORT=%s OMP_NUM_THREADS=%s GROUP_RANK=%s\n",
                  env("RANK").c_str(), env("WORLD_SIZE").c_str(), env("LOCAL_RANK").c_str(),
                  env("LOCAL_WORLD_SIZE").c_str(), env("MASTER_ADDR").c_str(),
                  env("MASTER_PORT").c_str(), env("OMP_NUM_THREADS").c_str(),
                  env("GROUP_RANK").c_str());
      return 0;
    }
    if ((mode == "fail" || mode == "stubborn") && argc == 4) {
      int rank = std::atoi(env("RANK").c_str());
      if (mode == "stubborn") std::signal(SIGTERM, SIG_IGN);
      if (rank == std::atoi(argv[2])) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return std::atoi(argv[3]);
      }
      std::printf("rank %d sleeps\n", rank);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return 0;
    }
    if (mode == "lines") {
      std::printf("hello from %s\n", env("RANK").c_str());
      std::fprintf(stderr, "warning from %s\n", env("RANK").c_str());
      std::printf("no newline at the end");
      return 0;
    }
    if (mode == "init" && (argc == 3 || argc == 4)) {
      par::init_process_group({.engine = argc == 4 ? argv[3] : "ring",
                               .init_method = argv[2],
                               .timeout = par::Seconds(30.0)});  // a guard: they all come
      dplab::Tensor t = dplab::full({5}, static_cast<double>(par::get_rank() + 1));
      par::default_process_group().all_reduce(t);
      std::printf("rank %d of %d all_reduce %.0f\n", par::get_rank(), par::get_world_size(),
                  t.at({4}));
      std::fflush(stdout);
      par::destroy_process_group();
      return 0;
    }
    if (mode == "mpi-early-exit") {
      // 5 s: rank 1's exit barrier gives up after 5 s, rank 0's watchdog only after 5 s plus
      // its 2.5 s grace, so rank 1's reason is the one that ends the job even if it runs late
      par::init_process_group({.engine = "mpi", .timeout = par::Seconds(5.0)});
      if (par::get_rank() == 1) {
        std::fprintf(stderr, "rank 1 leaves early\n");
        return 1;  // MPI_Finalize at exit would wait for rank 0 forever without the exit barrier
      }
      dplab::Tensor t = dplab::full({5}, 1.0);
      par::default_process_group().all_reduce(t);  // rank 1 never comes: only the abort ends it
      return 0;
    }
    if (mode == "rendezvous") return store_exchange(false);
    if (mode == "wrong-world") return store_exchange(true);
  } catch (const dplab::Error& e) {
    std::fprintf(stderr, "rank %s error: %s\n", env("RANK").c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "launch_child: unknown mode '%s'\n", mode.c_str());
  return 2;
}
