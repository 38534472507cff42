// security_victim.cpp: the job the security suite attacks, started under dplab-run.
//   security_victim GO_FILE [CHECKPOINT_PATH]
// Every rank builds its process group (ring: the shm transport and its shared block) and
// prints "rank R pid P ready"; then every rank waits (up to 60 s) for GO_FILE to exist, so
// the suite attacks while the job is up, on an event rather than after a sleep. Then the
// ranks train 5 steps; rank 0 saves a checkpoint if a path was given ("saved"), and prints
// "done". Any error exits 3 with the message.
// Read next: test_security.cpp.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "framework/dplab.h"
#include "framework/io/checkpoint.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"

using namespace dplab;
namespace par = dplab::parallel;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: security_victim GO_FILE [CHECKPOINT_PATH]\n");
    return 2;
  }
  try {
    const std::string go = argv[1], checkpoint = argc > 2 ? argv[2] : "";
    par::init_process_group({.engine = "ring"});
    const int rank = par::get_rank();
    std::printf("rank %d pid %d ready\n", rank, static_cast<int>(getpid()));
    std::fflush(stdout);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(go)) {
      DPLAB_CHECK(std::chrono::steady_clock::now() < deadline, "{} did not appear in 60 s", go);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    manual_seed(1);
    auto model = std::make_shared<models::MLP>(16, std::vector<int64_t>{8});
    par::DistributedDataParallel ddp(model);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    Tensor x = randn({8, 16});
    Tensor y = randint(0, 10, {8}, {.dtype = DType::Int64});
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      cross_entropy(ddp.forward(x), y).backward();
      opt.step();
    }
    if (rank == 0 && !checkpoint.empty()) {
      save_checkpoint(checkpoint, *model, &opt, {{"step", "5"}});
      std::printf("saved\n");
    }
    par::destroy_process_group();
    if (rank == 0) std::printf("done\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "security_victim: %s\n", e.what());
    return 3;
  }
}
