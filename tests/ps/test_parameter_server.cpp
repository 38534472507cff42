// test_parameter_server.cpp: the sharded parameter server (ps/parameter_server.h,
// algorithms/ps.cpp). Synchronous training equals one process on the whole batch
// (ddp_reference.h) for N = 1..4 ranks and every S, co-located and separate, SGD and Adam;
// every rank's push and pull bytes equal cost.h's formulas, which are the ring's at S = N and
// the star's at S = 1; a server holds only its shard's weights and state; bad plans get
// errors that say what was expected. Ranks are threads, and once forked processes (shm).
// Read next: tests/ddp/ddp_reference.h, tests/multinode/ (the same across namespaces).
#include <doctest/doctest.h>

#include <cmath>

#include "framework/optim/adam.h"
#include "models/toy.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/ps/parameter_server.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using namespace dplab::parallel::testing;

namespace {

const StateDict& init() {
  static StateDict sd = initial_state(7);
  return sd;
}

// The ToyModel's parameters: 10x10 + 10 + 5x10 + 5 = 165 elements: 2 and 4 do not divide
// it, so shards of unequal length are tested.
constexpr int64_t kToyParams = 165;

// One rank's PS training: rank 0 from init(), the others from their own draws (the
// construction's broadcast must make them equal); worker w trains rows of worker w.
// Returns the model's parameters on a worker, {} on a separate server.
Params ps_run(ProcessGroup& pg, PsOptions opts, InnerOptions inner, int steps = kSteps,
              ParameterServer** out = nullptr, std::unique_ptr<ParameterServer>* keep = nullptr) {
  auto model = std::make_shared<models::ToyModel>();
  if (pg.rank() == 0) model->load_state_dict(init());
  opts.process_group = borrow(pg);
  auto ps = std::make_unique<ParameterServer>(model->parameters(), inner, opts);
  const int w = ps->workers();
  for (int s = 0; s < steps; ++s) {
    if (ps->is_worker()) {
      ps->zero_grad();
      const int i = ps->worker_index();
      mse_loss(model->forward(rows_of(batch_x(s, w), i)), rows_of(batch_y(s, w), i)).backward();
    }
    ps->step();
  }
  if (out) *out = ps.get();
  const bool worker = ps->is_worker();
  if (keep) *keep = std::move(ps);
  return worker ? params_of(*model) : Params{};
}

// One process, the whole batch of W workers, Adam instead of SGD.
Params adam_reference(int world) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(init());
  optim::Adam opt(model->parameters(), {.lr = 0.01});
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    mse_loss(model->forward(batch_x(s, world)), batch_y(s, world)).backward();
    opt.step();
  }
  return params_of(*model);
}

// Throws (so forked ranks report it too) unless a and b agree to a relative 1e-5.
void require_close(const Params& a, const Params& b) {
  DPLAB_CHECK(a.size() == b.size(), "{} parameters, expected {}", a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    for (size_t i = 0; i < a[k].size(); ++i)
      DPLAB_CHECK(std::abs(a[k][i] - b[k][i]) <= 1e-5 * (1 + std::abs(b[k][i])),
                  "parameter {} element {}: {} against the single process's {}", k, i, a[k][i],
                  b[k][i]);
}

const optim::SGDOptions kSgd{.lr = 0.05, .momentum = 0.9};  // ddp_reference.h's

}  // namespace

TEST_CASE("PS: N = 1..4, every S co-located and separate, equals one process (SGD)") {
  for (int n = 1; n <= 4; ++n)
    for (int colocated = 1; colocated >= 0; --colocated)
      for (int s = 1; s <= (colocated ? n : n - 1); ++s) {
        CAPTURE(n);
        CAPTURE(s);
        CAPTURE(colocated);
        const int workers = colocated ? n : n - s;
        const Params expected = single_process_from(init(), workers);
        run_threads(n, [&](ProcessGroup& pg) {
          const Params got = ps_run(pg, {.servers = s, .colocated = colocated == 1}, kSgd);
          if (!got.empty()) require_close(got, expected);
        });
      }
}

TEST_CASE("PS with Adam: the servers' moments give one process's Adam") {
  for (auto [n, s, colocated] :
       {std::tuple{2, 1, true}, std::tuple{3, 2, true}, std::tuple{4, 4, true},
        std::tuple{4, 1, false}, std::tuple{4, 2, false}}) {
    CAPTURE(n);
    CAPTURE(s);
    CAPTURE(colocated);
    const Params expected = adam_reference(colocated ? n : n - s);
    run_threads(n, [&](ProcessGroup& pg) {
      const Params got =
          ps_run(pg, {.servers = s, .colocated = colocated}, optim::AdamOptions{.lr = 0.01});
      if (!got.empty()) require_close(got, expected);
    });
  }
}

TEST_CASE("PS traffic: every rank's push and pull equal the formulas; S = N is the ring's, "
          "S = 1 the star's") {
  for (int n = 2; n <= 4; ++n)
    for (int colocated = 1; colocated >= 0; --colocated)
      for (int s = 1; s <= (colocated ? n : n - 1); ++s) {
        CAPTURE(n);
        CAPTURE(s);
        CAPTURE(colocated);
        run_threads(n, [&](ProcessGroup& pg) {
          const int r = pg.rank();
          ParameterServer* ps = nullptr;
          std::unique_ptr<ParameterServer> keep;
          pg.reset_comm_stats();
          (void)ps_run(pg, {.servers = s, .colocated = colocated == 1}, kSgd, 1, &ps, &keep);
          const ServerPlan& plan = ps->plan();
          const auto stats = pg.comm_stats().per_collective;
          const Traffic push = ps_push_cost(plan, 4, r, n), pull = ps_pull_cost(plan, 4, r, n);
          CHECK(stats.at("ps_push").bytes_sent == push.sent);
          CHECK(stats.at("ps_push").bytes_received == push.received);
          CHECK(stats.at("ps_pull").bytes_sent == pull.sent);
          CHECK(stats.at("ps_pull").bytes_received == pull.received);
          // the formulas in words: a worker sends what it does not serve, server s takes b_s
          // from every other worker
          const int64_t p = 4 * kToyParams,
                        mine = ps->is_server() ? 4 * plan.shard_elems(plan.shard_of(r)) : 0;
          const int others = ps->workers() - (ps->is_worker() ? 1 : 0);
          CHECK(push.sent == (ps->is_worker() ? p - mine : 0));
          CHECK(push.received == others * mine);
          // a server holds its shard's weights and its momentum, nothing more
          CHECK(ps->shard_weight_bytes() == mine);
          CHECK(ps->optimizer_state_bytes() == mine);
        });
      }
  // the textbook volumes, on a size every N divides
  const int64_t p = 4 * 4 * 3 * 5;  // elements; bytes = 4p
  for (int n = 2; n <= 4; ++n)
    for (int r = 0; r < n; ++r) {
      CAPTURE(n);
      CAPTURE(r);
      const ServerPlan sharded = make_server_plan(p, n, n, true),
                       one = make_server_plan(p, n, 1, true);
      const Traffic ring = ring_all_reduce_cost(4 * p, 4, r, n),
                    star = star_all_reduce_cost(4 * p, r, n);
      const Traffic a = ps_push_cost(sharded, 4, r, n), b = ps_pull_cost(sharded, 4, r, n);
      CHECK(a.sent + b.sent == ring.sent);  // 2(N-1)/N * P
      CHECK(a.received + b.received == ring.received);
      const Traffic c = ps_push_cost(one, 4, r, n), d = ps_pull_cost(one, 4, r, n);
      CHECK(c.sent + d.sent == star.sent);  // (N-1) P at the hub, P at a leaf
      CHECK(c.received + d.received == star.received);
    }
}

TEST_CASE(
    "PS over forked processes (shm): co-located and separate servers train like one process") {
  for (auto [n, s, colocated] : {std::tuple{3, 2, true}, std::tuple{3, 1, false}}) {
    CAPTURE(s);
    const Params expected = single_process_from(init(), colocated ? n : n - s);
    auto outcomes = run_processes(n, [&](ProcessGroup& pg) {
      const Params got = ps_run(pg, {.servers = s, .colocated = colocated}, kSgd);
      if (!got.empty()) require_close(got, expected);
    });
    for (auto& o : outcomes) CHECK_MESSAGE(o.ok, o.message);
  }
}

TEST_CASE("PS: bad plans and buffers are refused with what was expected") {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([] {
          make_server_plan(10, 4, 0, true);
        }).find("expected 1 to 4 co-located servers for 4 ranks, got 0") != std::string::npos);
  CHECK(message([] { make_server_plan(10, 4, 4, false); }).find("at least one rank must work") !=
        std::string::npos);
  CHECK(message([] {
          check_server_plan({.elems = 10, .servers = {1, 1}}, 4);
        }).find("rank 1 holds two shards") != std::string::npos);
  CHECK(message([] {
          check_server_plan({.elems = 10, .servers = {4}}, 4);
        }).find("server 0 is rank 4, not in [0, 4)") != std::string::npos);
  CHECK(message([] {
          make_server_plan(3, 4, 4, true);
        }).find("expected at most 3 servers for 3 parameters") != std::string::npos);
  // through the optimizer: every rank gets the same message, none waits on another
  run_threads(2, [&](ProcessGroup& pg) {
    auto model = std::make_shared<models::ToyModel>();
    const std::string m = message([&] {
      ParameterServer(model->parameters(), kSgd, {.servers = 3, .process_group = borrow(pg)});
    });
    CHECK(m.find("expected 1 to 2 co-located servers for 2 ranks, got 3") != std::string::npos);
    const std::string sep = message([&] {
      ParameterServer(model->parameters(), kSgd,
                      {.servers = 2, .colocated = false, .process_group = borrow(pg)});
    });
    CHECK(sep.find("expected 1 to 1 separate servers for 2 ranks, got 2") != std::string::npos);
  });
  // ranks that pass different parameters: named on every rank before a shard moves
  run_threads(3, [&](ProcessGroup& pg) {
    auto model = std::make_shared<models::ToyModel>();
    std::vector<Tensor> params = model->parameters();
    if (pg.rank() == 1) params.pop_back();  // rank 1 leaves out the last bias (5 elements)
    const std::string m = message(
        [&] { ParameterServer(params, kSgd, {.servers = 2, .process_group = borrow(pg)}); });
    CAPTURE(m);
    CHECK(m.find("every rank must pass the same parameters") != std::string::npos);
    CHECK(m.find("range over 3..4 tensors and 160..165 elements") != std::string::npos);
  });
  run_threads(2, [&](ProcessGroup& pg) {
    const ServerPlan plan = make_server_plan(10, 2, 1, false);  // rank 1 serves all 10
    Tensor wrong = zeros({pg.rank() == 0 ? 9 : 4});  // both wrong: neither waits for the other
    const std::string m = message([&] { pg.ps_push(wrong, plan); });
    if (pg.rank() == 0)
      CHECK(m.find("ps_push: rank 0 must pass 10 elements (all of 10") != std::string::npos);
    if (pg.rank() == 1)
      CHECK(m.find("ps_push: rank 1 must pass 10 elements (its shard of 10") != std::string::npos);
  });
}

namespace {

// An engine with only the collectives every engine has and no parameter-server exchange,
// named like the nccl engine, which is in that position (nccl_engine.cpp overrides neither
// ps_push nor ps_pull: NCCL's collectives have no schedule of ps.cpp's shape). One rank, so
// the check runs on machines without a GPU.
struct NoExchangeEngine final : CollectiveEngine {
  std::string name_ = "nccl";
  const std::string& name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  [[noreturn]] static void unused() { throw Error("not used by this test"); }
  void all_reduce(CollectiveCall&, Tensor&, ReduceOp, std::optional<Algorithm>) override {
    unused();
  }
  void broadcast(CollectiveCall&, Tensor&, int) override { unused(); }
  void reduce(CollectiveCall&, Tensor&, int, ReduceOp) override { unused(); }
  void all_gather(CollectiveCall&, std::vector<Tensor>&, const Tensor&) override { unused(); }
  void reduce_scatter(CollectiveCall&, Tensor&, const std::vector<Tensor>&, ReduceOp) override {
    unused();
  }
  void gather(CollectiveCall&, std::vector<Tensor>&, const Tensor&, int) override { unused(); }
  void scatter(CollectiveCall&, Tensor&, const std::vector<Tensor>&, int) override { unused(); }
  void barrier(CollectiveCall&) override { unused(); }
  void send(CollectiveCall&, const Tensor&, int) override { unused(); }
  void recv(CollectiveCall&, Tensor&, int) override { unused(); }
  void abort(const std::string&) override {}
};

}  // namespace

TEST_CASE("PS on an engine without the exchange (nccl's position) says so and names the engine") {
  auto pg = std::make_shared<ProcessGroup>(std::make_unique<NoExchangeEngine>());
  Tensor t = zeros({10});
  CHECK_THROWS_WITH_AS(pg->ps_push(t, make_server_plan(10, 1, 1, true)),
                       doctest::Contains("ps_push(1 shards): the nccl engine has no "
                                         "parameter-server exchange; use dplab's engine"),
                       Error);
  // the optimizer reaches the same message at its first step
  auto pg2 = std::make_shared<ProcessGroup>(std::make_unique<NoExchangeEngine>());
  auto model = std::make_shared<models::ToyModel>();
  ParameterServer ps(model->parameters(), kSgd, {.process_group = pg2});
  mse_loss(model->forward(batch_x(0, 1)), batch_y(0, 1)).backward();
  CHECK_THROWS_WITH_AS(
      ps.step(), doctest::Contains("the nccl engine has no parameter-server exchange"), Error);
}
