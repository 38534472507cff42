// DDP checkpoints: rank 0 saves, every rank loads onto its own cpu:rank device, and
// K steps straight equal K/2 steps + save + load into fresh objects + K/2 steps, bit for
// bit (parameters and momentum). Run as forked processes over shared memory, as in real use.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>

#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp_utils/ddp_checkpoint.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/parallel/rank_harness.h"

using dplab::parallel::testing::borrow;

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::batch_x;  // the reference job's batches and parameters
using dplab::parallel::testing::batch_y;
using dplab::parallel::testing::params_of;
using dplab::parallel::testing::rows_of;
using dplab::parallel::testing::run_processes;
using dplab::parallel::testing::run_threads;

namespace {

constexpr int kTrainSteps = 6;  // straight, or half, a checkpoint, and the other half

struct Run {
  std::shared_ptr<models::ToyModel> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<optim::SGD> opt;
};

// A fresh model on cpu:rank with a rank-dependent init (DDP's broadcast makes them equal).
Run make_run(ProcessGroup& pg, uint64_t seed) {
  Run run;
  manual_seed(seed + static_cast<uint64_t>(pg.rank()));
  run.model = std::make_shared<models::ToyModel>();
  run.model->to(Device(DeviceKind::CPU, pg.rank()));
  run.ddp =
      std::make_unique<DistributedDataParallel>(run.model, DDPOptions{.process_group = borrow(pg)});
  run.opt = std::make_unique<optim::SGD>(run.ddp->parameters(),
                                         optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  return run;
}

void train(Run& run, ProcessGroup& pg, int from, int to) {
  Device dev(DeviceKind::CPU, pg.rank());
  for (int s = from; s < to; ++s) {
    Tensor x = rows_of(batch_x(s, pg.size()), pg.rank()).to(dev);
    Tensor y = rows_of(batch_y(s, pg.size()), pg.rank()).to(dev);
    run.opt->zero_grad();
    mse_loss(run.ddp->forward(x), y).backward();
    run.opt->step();
  }
}

std::string temp_path(const char* tag) {
  return "/tmp/dplab-ddp-ckpt-" + std::to_string(getpid()) + "-" + tag + ".safetensors";
}

}  // namespace

TEST_CASE("resume under DDP: K steps straight equal K/2 + save/load + K/2, on 2 processes") {
  const std::string path = temp_path("resume");
  auto outcomes = run_processes(2, [&](ProcessGroup& pg) {
    Run straight = make_run(pg, 7);
    train(straight, pg, 0, kTrainSteps);

    Run first = make_run(pg, 7);
    train(first, pg, 0, kTrainSteps / 2);
    save_checkpoint_on_rank0(pg, path, *first.ddp, first.opt.get(),
                             {{"step", std::to_string(kTrainSteps / 2)}});

    // Fresh objects with a different init: everything must come from the file.
    Run resumed = make_run(pg, 1000);
    Metadata meta = load_checkpoint_on_all_ranks(pg, path, *resumed.ddp, resumed.opt.get());
    DPLAB_CHECK(meta.at("step") == "3", "expected step 3 in the metadata, got {}", meta.at("step"));
    for (const Tensor& p : resumed.model->parameters())
      DPLAB_CHECK(p.device() == Device(DeviceKind::CPU, pg.rank()),
                  "rank {}: parameter on {}, expected cpu:{}", pg.rank(), p.device(), pg.rank());
    train(resumed, pg, kTrainSteps / 2, kTrainSteps);

    auto a = params_of(*straight.model), b = params_of(*resumed.model);
    DPLAB_CHECK(a == b, "rank {}: resumed parameters differ from the uninterrupted run", pg.rank());
    auto c = params_of(*first.model);
    DPLAB_CHECK(a != c, "rank {}: the second half changed nothing, the test would prove nothing",
                pg.rank());
  });
  for (auto& o : outcomes) CHECK_MESSAGE(o.ok, o.message);
  std::filesystem::remove(path);
}

TEST_CASE("the file holds the inner module's names and loads into a plain model") {
  const std::string path = temp_path("plain");
  std::vector<std::vector<float>> from_ddp;
  run_threads(2, [&](ProcessGroup& pg) {
    Run run = make_run(pg, 3);
    save_checkpoint_on_rank0(pg, path, *run.ddp);
    if (pg.rank() == 0) from_ddp = params_of(*run.model);
  });
  models::ToyModel plain;
  load_checkpoint(path, plain);  // strict: "module.net1.weight" would be rejected
  CHECK(params_of(plain) == from_ddp);
  std::filesystem::remove(path);
}

TEST_CASE("rank 0 failing to save is an error on every rank, not a hang") {
  std::vector<std::string> messages(2);
  std::vector<bool> threw(2, false);
  run_threads(2, [&](ProcessGroup& pg) {
    models::ToyModel m;
    try {
      save_checkpoint_on_rank0(pg, "/nonexistent-dir/x/ckpt.safetensors", m);
    } catch (const Error& e) {
      threw[pg.rank()] = true;
      messages[pg.rank()] = e.what();
    }
  });
  CHECK(threw[0]);
  CHECK(threw[1]);
  CHECK(messages[1].find("rank 0 failed to write") != std::string::npos);
}

TEST_CASE("a rank that cannot load is named on every rank") {
  std::vector<std::string> messages(2);
  run_threads(2, [&](ProcessGroup& pg) {
    models::ToyModel m;
    std::string path = pg.rank() == 1 ? "/nonexistent-dir/ckpt.safetensors" : temp_path("load");
    if (pg.rank() == 0) save_checkpoint(path, m);
    try {
      load_checkpoint_on_all_ranks(pg, path, m);
    } catch (const Error& e) {
      messages[pg.rank()] = e.what();
    }
    pg.barrier();
    if (pg.rank() == 0) std::filesystem::remove(path);
  });
  CHECK(messages[0].find("rank(s) 1 failed to load") != std::string::npos);
  CHECK(!messages[1].empty());
}
