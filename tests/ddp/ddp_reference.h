// ddp_reference.h: the job every DDP parity test runs, and its single-process answer.
// ToyModel, SGD (lr 0.05, momentum 0.9), kSteps steps; step s's global batch has
// world * kPerRank rows, of which rank r trains on rows [r*kPerRank, (r+1)*kPerRank). With
// `accumulate` micro-batches per step the reference sums their gradients, as no_sync does.
// Tests whose ranks are threads start every replica from one state made in the test thread
// (initial_state: the default generator is shared by the threads, so seeding inside them
// would race) and compare with single_process_from that state.
// Partly is the model of the unused-parameter tests: its second layer runs only when told to.
// Used by tests/ddp, tests/zero, tests/ps, tests/horovod, tests/ddp_utils (checkpoints),
// tests/ddp_extensions (model parallel, compression) and tests/parallel/test_gpu_training.cpp.
// Read next: test_ddp.cpp (threads and shm processes), test_ddp_mpi.cpp (mpirun).
#pragma once
#include <memory>
#include <vector>

#include "framework/nn/layers.h"
#include "framework/nn/module.h"
#include "framework/nn/state_dict.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/compression.h"
#include "parallel/ddp/distributed_data_parallel.h"

namespace dplab::parallel::testing {

inline constexpr int kSteps = 3;
inline constexpr int64_t kPerRank = 4;

// The global batch of step s (inputs [world * kPerRank, 10], targets [..., 5]).
inline Tensor batch_x(int s, int world) {
  Generator g(100 + s);
  return randn({world * kPerRank, 10}, {}, &g);
}
inline Tensor batch_y(int s, int world) {
  Generator g(200 + s);
  return randn({world * kPerRank, 5}, {}, &g);
}
// Rank r's rows of a global batch.
inline Tensor rows_of(const Tensor& global, int rank) {
  return global.narrow(rank * kPerRank, kPerRank);
}

// A ToyModel state drawn from its own generator (seeded per test), to load into every replica.
inline StateDict initial_state(uint64_t seed) {
  Generator g(seed);
  StateDict sd;
  sd.insert("net1.weight", randn({10, 10}, {}, &g));
  sd.insert("net1.bias", randn({10}, {}, &g));
  sd.insert("net2.weight", randn({5, 10}, {}, &g));
  sd.insert("net2.bias", randn({5}, {}, &g));
  return sd;
}

using Params = std::vector<std::vector<float>>;
inline Params params_of(nn::Module& m) {
  Params out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

// Two layers, a then b; b runs only while use_b is set, so its parameters go unused (no
// gradient) in the steps without it: what find_unused_parameters is for.
struct Partly : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  bool use_b = false;
  Partly() {
    a = register_module("a", std::make_shared<nn::Linear>(3, 3));
    b = register_module("b", std::make_shared<nn::Linear>(3, 3));
  }
  Tensor forward(const Tensor& x) override {
    return use_b ? b->forward(a->forward(x)) : a->forward(x);
  }
};

// One process, the whole global batch, the model initialised from seed 0.
inline Params single_process(int world, int accumulate = 1) {
  manual_seed(0);
  auto model = std::make_shared<models::ToyModel>();
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    for (int a = 0; a < accumulate; ++a)
      mse_loss(model->forward(batch_x(s * accumulate + a, world)),
               batch_y(s * accumulate + a, world))
          .backward();
    opt.step();
  }
  return params_of(*model);
}

// One process, the whole global batch, from `init`, for `steps` steps.
inline Params single_process_from(const StateDict& init, int world, int steps = kSteps) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(init);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    mse_loss(model->forward(batch_x(s, world)), batch_y(s, world)).backward();
    opt.step();
  }
  return params_of(*model);
}

// Rank `rank`'s forward and backward on its rows of micro-batch b. Every micro-batch but a
// step's last runs under no_sync, so gradients accumulate locally and are all-reduced once.
inline void ddp_micro_batch(DistributedDataParallel& ddp, int b, int world, int rank, bool last) {
  Tensor x = rows_of(batch_x(b, world), rank);
  Tensor y = rows_of(batch_y(b, world), rank);
  if (last) {
    mse_loss(ddp.forward(x), y).backward();
    return;
  }
  auto guard = ddp.no_sync();
  mse_loss(ddp.forward(x), y).backward();
}

// One rank's DDP training of the reference job: rank 0 starts from seed 0's weights (as
// single_process), the others from other seeds, so the broadcast at construction must make
// them identical; `accumulate` micro-batches per step (all but the last under no_sync),
// fp16: gradients compressed to float16 on the wire. Must equal single_process(N, accumulate).
inline Params ddp_train(std::shared_ptr<ProcessGroup> pg, int accumulate = 1, bool fp16 = false) {
  const int r = pg->rank(), world = pg->size();
  manual_seed(r == 0 ? 0 : 1000 + r);
  auto model = std::make_shared<models::ToyModel>();
  DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.0001, .process_group = pg});
  if (fp16) ddp.register_comm_hook(fp16_compress_hook());
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    for (int a = 0; a < accumulate; ++a)
      ddp_micro_batch(ddp, s * accumulate + a, world, r, a + 1 == accumulate);
    opt.step();
  }
  return params_of(*model);
}

}  // namespace dplab::parallel::testing
