// fault_trainer.cpp: the long-running DDP program that the fault-injection suite starts under
// dplab-run (or mpirun) and then kills, stops or interrupts.
//   fault_trainer BACKEND STEPS [CHECKPOINT_PATH CHECKPOINT_MB]
// Every rank prints "rank R pid P ready" once the group it trains with is up, so the suite
// knows whom to hit; rank 0 prints "step S" after each step, and with a checkpoint path it
// saves a CHECKPOINT_MB file there every step ("saving S" before, "saved S" after), which
// makes a window a signal can land in. Ends with "done" on rank 0; an error exits 3 with the
// message.
// Two timeouts: start-up waits DPLAB_RENDEZVOUS_TIMEOUT (the suite: 60 s), training's
// collectives DPLAB_TIMEOUT (the suite: a short one, after which a stopped rank is named).
// Read next: test_faults.cpp.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "framework/dplab.h"
#include "framework/io/safetensors.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"

using namespace dplab;
namespace par = dplab::parallel;

namespace {

// The group that trains. The default group is made with the rendezvous timeout: exec'ing
// and loading N ranks on a loaded machine, and their set-up (the shared block, or MPI's), are
// not what a fault drill tests. Once every rank has met on it (a barrier), the training group
// is made with the collectives' short timeout: its set-up then starts on every rank at once,
// as a collective does.
std::shared_ptr<par::ProcessGroup> training_group(const std::string& engine) {
  const par::Seconds collectives = par::resolve_timeout(std::nullopt);
  par::init_process_group(
      {.engine = engine, .timeout = par::resolve_rendezvous_timeout(std::nullopt, collectives)});
  par::default_process_group().barrier();
  auto store = par::default_store();
  auto group = par::create_process_group(store, par::get_rank(), par::get_world_size(),
                                         {.engine = engine, .timeout = collectives});
  store->set_timeout(collectives);  // as init_process_group leaves it
  return group;
}

void train(const std::string& engine, int steps, const std::string& checkpoint, int checkpoint_mb) {
  auto group = training_group(engine);
  const int rank = group->rank();
  std::printf("rank %d pid %d ready\n", rank, static_cast<int>(getpid()));
  std::fflush(stdout);

  manual_seed(static_cast<uint64_t>(rank));
  auto model = std::make_shared<models::MLP>(784, std::vector<int64_t>{128});
  par::DistributedDataParallel ddp(model, {.process_group = group});
  optim::SGD opt(ddp.parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({32, 784});
  Tensor y = randint(0, 10, {32}, {.dtype = DType::Int64});
  // The checkpoint is padded to CHECKPOINT_MB so that saving it takes a while.
  StateDict state = model->state_dict();
  if (checkpoint_mb > 0) state.insert("padding", zeros({int64_t{checkpoint_mb} << 18}));
  for (int step = 1; step <= steps; ++step) {
    opt.zero_grad();
    cross_entropy(ddp.forward(x), y).backward();
    opt.step();
    if (rank != 0) continue;
    std::printf("step %d\n", step);
    if (!checkpoint.empty()) {
      std::printf("saving %d\n", step);
      std::fflush(stdout);
      save_safetensors(checkpoint, state, {{"step", std::to_string(step)}});
      std::printf("saved %d\n", step);
    }
    std::fflush(stdout);
  }
  par::destroy_process_group();
  if (rank == 0) std::printf("done\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr,
                 "usage: fault_trainer ring|star|mpi STEPS [CHECKPOINT_PATH CHECKPOINT_MB]\n");
    return 2;
  }
  try {
    train(argv[1], std::stoi(argv[2]), argc == 5 ? argv[3] : "",
          argc == 5 ? std::stoi(argv[4]) : 0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_trainer: error: %s\n", e.what());
    return 3;
  }
}
