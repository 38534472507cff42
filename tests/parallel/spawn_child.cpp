// spawn_child.cpp: a program that calls spawn(), started by test_launch.cpp.
//   spawn_child ok N DIR     each rank writes DIR/rank<r>.txt with what it saw; the parent
//                            then writes DIR/parent.txt (so a rank running main() past
//                            spawn() would show up as an extra line there)
//   spawn_child fail N DIR   rank 1 throws; the others sleep 60 s. The parent prints the
//                            Error that spawn() throws and exits 3.
// Read next: test_launch.cpp.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "framework/error.h"
#include "parallel/launch/spawn.h"

namespace par = dplab::parallel;

static std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: spawn_child ok|fail N DIR\n");
    return 2;
  }
  std::string mode = argv[1], dir = argv[3];
  int n = std::atoi(argv[2]);
  try {
    if (mode == "ok") {
      par::spawn(
          [&](int rank) {
        std::ofstream f(dir + "/rank" + std::to_string(rank) + ".txt");
        f << "rank " << rank << " RANK " << env("RANK") << " WORLD_SIZE " << env("WORLD_SIZE")
          << " MASTER_PORT " << env("MASTER_PORT") << "\n";
          },
          n);
      std::ofstream(dir + "/parent.txt", std::ios::app) << "parent done\n";
      return 0;
    }
    if (mode == "fail") {
      par::spawn(
          [](int rank) {
        if (rank == 1) throw dplab::Error("rank 1 gives up");
        std::this_thread::sleep_for(std::chrono::seconds(60));
          },
          n, {.grace = par::Seconds(1.0)});
      return 0;
    }
  } catch (const dplab::Error& e) {
    std::printf("spawn failed: %s\n", e.what());
    return 3;
  }
  return 2;
}
