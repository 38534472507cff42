// ZeroRedundancyOptimizer: stages 1 and 2 with SGD (momentum) and Adam equal one process and
// plain DDP for N = 1..4 (uneven shards), without DDP and with it (both ways); the traffic is
// exactly one all-reduce's; the memory per rank is the textbook's; a consolidated state dict
// loads into the plain optimizer and back with identical training afterwards; bad use throws.
// Ranks are threads, and once forked processes on the star engine.
#include <doctest/doctest.h>

#include <cstdio>

#include "framework/io/checkpoint.h"
#include "tests/parallel/rank_harness.h"
#include "tests/zero/zero_reference.h"

using namespace dplab;
using namespace dplab::parallel;
using namespace dplab::parallel::testing;

namespace {

// ToyModel's parameter sizes, in registration order.
const std::vector<int64_t> kSizes = {100, 10, 50, 5};

// c_i = ceil(P_i / N): what each shard travels as.
int64_t padded(int64_t p, int n) { return (p + n - 1) / n; }

}  // namespace

TEST_CASE("ZeRO stage 1 and 2, SGD and Adam, equal one process and plain DDP for N = 1..4") {
  for (const InnerOptions& o : {kSgd, kAdam}) {
    for (int world = 1; world <= 4; ++world) {
      const Params single = zero_single_process(world, o);
      for (int stage : {1, 2}) {
        CAPTURE(world);
        CAPTURE(stage);
        CAPTURE(o.index());
        run_threads(world, [&](ProcessGroup& pg) {
          const Params ddp = plain_ddp_run(borrow(pg), o);
          const Params zero = zero_run(borrow(pg), stage, o, WithDdp::No);
          CHECK(max_abs_diff(zero, ddp) <= 1e-6f);
          CHECK(max_abs_diff(zero, single) <= 1e-5f);
          CHECK(max_abs_diff(zero, single) < 1e29f);  // same shapes
        });
      }
    }
  }
}

TEST_CASE(
    "ZeRO with DDP: averaged gradients (stage 1) or DDP's local hook (stage 2) equal plain DDP") {
  for (const InnerOptions& o : {kSgd, kAdam}) {
    for (int world : {2, 3}) {
      CAPTURE(world);
      run_threads(world, [&](ProcessGroup& pg) {
        const Params ddp = plain_ddp_run(borrow(pg), o);
        CHECK(max_abs_diff(zero_run(borrow(pg), 1, o, WithDdp::Averaged), ddp) <= 1e-6f);
        CHECK(max_abs_diff(zero_run(borrow(pg), 2, o, WithDdp::Averaged), ddp) <= 1e-6f);
        CHECK(max_abs_diff(zero_run(borrow(pg), 2, o, WithDdp::LocalHook), ddp) <= 1e-6f);
        CHECK(max_abs_diff(zero_run(borrow(pg), 1, o, WithDdp::LocalHook), ddp) <= 1e-6f);
      });
    }
  }
}

TEST_CASE("ZeRO on the star engine over shm processes equals one process") {
  const int world = 3;
  const Params single = zero_single_process(world, kAdam);
  auto outcomes = run_processes(
      world,
      [&](ProcessGroup& pg) {
    const Params zero = zero_run(borrow(pg), 2, kAdam, WithDdp::No);
    DPLAB_CHECK(max_abs_diff(zero, single) <= 1e-5f,
                "ZeRO-2 on star differs from one process by {}", max_abs_diff(zero, single));
      },
      {.engine = "star"});
  for (const Outcome& out : outcomes) CHECK_MESSAGE(out.ok, out.message);
}

TEST_CASE("ZeRO's traffic is one all-reduce's: reduce-scatter + all-gather = 2(N-1)/N of the "
          "padded bytes") {
  for (int world = 2; world <= 4; ++world) {
    CAPTURE(world);
    run_threads(world, [&](ProcessGroup& pg) {
      auto model = std::make_shared<models::ToyModel>();
      ZeroRedundancyOptimizer opt(model->parameters(), kSgd,
                                  {.stage = 2, .process_group = borrow(pg)});
      pg.reset_comm_stats();
      train_rank(*model, opt, world, pg.rank(), 0, 1);
      const CommStats zero = pg.comm_stats();
      // the textbook: per parameter, (N-1) blocks of c_i out in each of the two collectives
      int64_t expected = 0;
      for (int64_t p : kSizes) expected += 2 * (world - 1) * padded(p, world) * 4;
      CHECK(zero.total.bytes_sent == expected);
      CHECK(zero.total.bytes_received == expected);
      CHECK(zero.per_collective.at("reduce_scatter").bytes_sent == expected / 2);
      CHECK(zero.per_collective.at("all_gather").bytes_sent == expected / 2);
      CHECK(zero.per_collective.at("reduce_scatter").calls == 4);
      // and what a ring all-reduce of the same padded gradients sends, measured
      pg.reset_comm_stats();
      for (int64_t p : kSizes) {
        Tensor g = zeros({world * padded(p, world)});
        pg.all_reduce(g);
      }
      CHECK(pg.comm_stats().total.bytes_sent == expected);
    });
  }
}

TEST_CASE("ZeRO's memory per rank: optimizer state 1/N (Adam 8 bytes, SGD 4), stage 2 keeps 1/N of "
          "the gradients") {
  const int world = 3;
  run_threads(world, [&](ProcessGroup& pg) {
    for (int stage : {1, 2}) {
      auto model = std::make_shared<models::ToyModel>();
      ZeroRedundancyOptimizer opt(model->parameters(), kAdam,
                                  {.stage = stage, .process_group = borrow(pg)});
      train_rank(*model, opt, world, pg.rank(), 0, 1);
      int64_t shard = 0, full_grads = 0;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        shard += chunk_elems(kSizes[i], world, pg.rank());
        CHECK(opt.shard_numel(i) == chunk_elems(kSizes[i], world, pg.rank()));
        if (model->parameters()[i].grad().defined())
          full_grads += model->parameters()[i].grad().nbytes();
      }
      CHECK(opt.optimizer_state_bytes() == 8 * shard);  // exp_avg + exp_avg_sq of my shard only
      if (stage == 1) {
        CHECK(full_grads == 4 * 165);  // the full gradients stay until zero_grad
        CHECK(opt.gradient_shard_bytes() == 0);
      } else {
        CHECK(full_grads == 0);  // freed after the reduce-scatter
        CHECK(opt.gradient_shard_bytes() == 4 * shard);
      }
    }
  });
}

TEST_CASE("consolidate_state_dict: loads into the plain optimizer and back, training continues "
          "identically") {
  for (const InnerOptions& o : {kSgd, kAdam}) {
    const int world = 3, to_rank = 1;
    const std::string path = "/tmp/dplab-test-zero-" + std::to_string(getpid()) + ".safetensors";
    std::vector<Params> zero_after(world);
    Params zero_model;
    // ZeRO: 3 steps, consolidate on rank 1, save; then 3 more steps
    run_threads(world, [&](ProcessGroup& pg) {
      auto model = std::make_shared<models::ToyModel>();
      model->load_state_dict(zero_initial_weights());
      ZeroRedundancyOptimizer opt(model->parameters(), o,
                                  {.stage = 2, .process_group = borrow(pg)});
      train_rank(*model, opt, world, pg.rank(), 0, kSteps);
      opt.consolidate_state_dict(to_rank);
      if (pg.rank() == to_rank) {
        save_checkpoint(path, *model,
                        &opt);  // the ordinary checkpoint: model + plain optimizer state
      } else {
        StateDict sd;
        Metadata meta;
        CHECK_THROWS_WITH_AS(opt.state_dict(sd, meta), doctest::Contains("consolidate_state_dict"),
                             Error);
      }
      pg.barrier();
      train_rank(*model, opt, world, pg.rank(), kSteps, kSteps);
      zero_after[pg.rank()] = params_of(*model);
    });
    // the plain optimizer on one process loads the file and trains the same 3 steps
    auto model = std::make_shared<models::ToyModel>();
    auto plain = plain_optimizer(model->parameters(), o);
    load_checkpoint(path, *model, plain.get());
    train_single(*model, *plain, world, kSteps, kSteps);
    for (int r = 0; r < world; ++r) CHECK(max_abs_diff(zero_after[r], params_of(*model)) <= 1e-5f);
    // and back: a fresh ZeRO (another N) loads the plain state and trains like the plain one
    // (state dicts share storage with the live tensors, as torch's do: copy them first)
    auto copied = [](const StateDict& sd) {
      StateDict out;
      for (const auto& [name, t] : sd) out.insert(name, t.detach().clone());
      return out;
    };
    StateDict plain_sd;
    Metadata plain_meta;
    plain->state_dict(plain_sd, plain_meta);
    plain_sd = copied(plain_sd);
    const StateDict weights = copied(model->state_dict());
    train_single(*model, *plain, 2, 2 * kSteps, kSteps);
    run_threads(2, [&](ProcessGroup& pg) {
      auto m = std::make_shared<models::ToyModel>();
      m->load_state_dict(weights);
      ZeroRedundancyOptimizer opt(m->parameters(), o, {.stage = 1, .process_group = borrow(pg)});
      opt.load_state_dict(plain_sd, plain_meta);
      train_rank(*m, opt, 2, pg.rank(), 2 * kSteps, kSteps);
      CHECK(max_abs_diff(params_of(*m), params_of(*model)) <= 1e-5f);
    });
    std::remove(path.c_str());
  }
}

TEST_CASE(
    "ZeRO-2 refuses a second backward before step() (its gradients are already reduce-scattered)") {
  run_threads(2, [&](ProcessGroup& pg) {
    auto model = std::make_shared<models::ToyModel>();
    ZeroRedundancyOptimizer opt(model->parameters(), kSgd,
                                {.stage = 2, .process_group = borrow(pg)});
    Tensor x = batch_x(0, 2).narrow(pg.rank() * kPerRank, kPerRank),
           y = batch_y(0, 2).narrow(pg.rank() * kPerRank, kPerRank);
    mse_loss(model->forward(x), y).backward();
    CHECK_THROWS_WITH_AS(
        mse_loss(model->forward(x), y).backward(),
        doctest::Contains("got a second gradient before step(); stage 2 reduce-scatters"), Error);
  });
}

TEST_CASE("ZeRO: bad use gives clear errors") {
  run_threads(1, [&](ProcessGroup& pg) {
    auto model = std::make_shared<models::ToyModel>();
    CHECK_THROWS_WITH_AS(
        ZeroRedundancyOptimizer(model->parameters(), kSgd,
                                {.stage = 3, .process_group = borrow(pg)}),
        doctest::Contains("stage must be 1 (optimizer state) or 2 (and gradients), got 3"), Error);
    ZeroRedundancyOptimizer opt(model->parameters(), kSgd, {.process_group = borrow(pg)});
    CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("parameter 0 has no gradient"), Error);
    CHECK_THROWS_WITH_AS(opt.consolidate_state_dict(4),
                         doctest::Contains("to_rank must be in [0, 1), got 4"), Error);
    StateDict sd;
    Metadata meta{{"optim.type", "Adam"}, {"optim.num_params", "4"}};
    CHECK_THROWS_WITH_AS(opt.load_state_dict(sd, meta),
                         doctest::Contains("expected a SGD state dict, got optim.type \"Adam\""),
                         Error);
    // a step count that is not one: the key and the expected form, not a bare "stoll"
    StateDict plain;
    Metadata good;
    optim::SGD(model->parameters(), std::get<optim::SGDOptions>(kSgd)).state_dict(plain, good);
    Metadata bad = good;
    bad["state.1.step"] = "abc";
    CHECK_THROWS_WITH_AS(
        opt.load_state_dict(plain, bad),
        doctest::Contains("ZeroRedundancyOptimizer::load_state_dict: \"state.1.step\" "
                          "should be a step count (an integer >= 0), got \"abc\""),
        Error);
  });
}
