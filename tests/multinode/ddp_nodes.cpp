// ddp_nodes.cpp: DDP across nodes on one engine, started by dplab-run on every node
// (run_job.sh). Every rank trains tests/ddp's ToyModel job and compares its parameters with
// one process trained on the whole batch (ddp_reference.h, tolerance 1e-5 as tests/ddp);
// then it all-reduces a 4 MiB tensor and checks the sum, so that the job's bytes must cross
// the nodes' links (run_job.sh --min-link-bytes asserts they did: ranks in namespaces
// share /dev/shm, and an engine that quietly went through it would otherwise pass); on
// dplab's engines its bytes to and from other nodes must equal cost.h's formula.
//   ddp_nodes ENGINE        (ENGINE as init_process_group's: gloo, ring, star, ...)
//   ddp_nodes ps:S          the sharded parameter server, S servers co-located with the
//                           workers, over dplab's ring (its push and pull cross the nodes)
// Exit 0 equal, 1 different or failed; a refused engine's message goes to stderr.
// Read next: run_job.sh, tests/ddp/ddp_reference.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/error.h"
#include "parallel/algorithms/cost.h"
#include "parallel/comm/init.h"
#include "parallel/ps/parameter_server.h"
#include "tests/ddp/ddp_reference.h"

using namespace dplab;
using namespace dplab::parallel;
using namespace dplab::parallel::testing;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ddp_nodes ENGINE\n");
    return 2;
  }
  try {
    const std::string arg = argv[1];
    const bool ps = arg.rfind("ps:", 0) == 0;
    auto pg = init_process_group({.engine = ps ? std::string("ring") : arg});
    const int r = pg->rank(), world = pg->size();
    const Params expected = single_process(world, 1);
    // DDP's (ddp_train's) or the PS's broadcast at construction must make the replicas equal
    manual_seed(r == 0 ? 0 : 1000 + r);
    auto model = std::make_shared<models::ToyModel>();
    if (ps) {
      ParameterServer opt(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9},
                          {.servers = std::stoi(arg.substr(3)), .process_group = pg});
      for (int s = 0; s < kSteps; ++s) {
        opt.zero_grad();
        mse_loss(model->forward(rows_of(batch_x(s, world), r)), rows_of(batch_y(s, world), r))
            .backward();
        opt.step();
      }
    }
    const Params got = ps ? params_of(*model) : ddp_train(pg);
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k)
      for (size_t i = 0; i < got[k].size(); ++i)
        worst = std::max(worst, std::abs(double(got[k][i]) - expected[k][i]) /
                                    std::max(1.0, std::abs(double(expected[k][i]))));
    // 4 MiB of (rank + 1): every element must come back as world * (world + 1) / 2
    const int64_t n = (4 << 20) / 4;
    Tensor big = full({n}, static_cast<double>(r + 1));
    pg->reset_comm_stats();
    pg->all_reduce(big);
    // dplab's engines count the bytes to and from other nodes: they must be the formula's
    // (gloo reports its formula without a node split, so it is not checked here)
    int64_t off_formula = 0;
    if (pg->engine() != "gloo") {
      const int per_node = std::atoi(std::getenv("LOCAL_WORLD_SIZE"));
      std::string algo = pg->all_reduce_algorithm(big.nbytes());
      if (algo.rfind("auto:", 0) == 0) algo = algo.substr(5);
      const Traffic want =
          all_reduce_cost(algorithm_from_name(algo), big.nbytes(), 4, r, world, per_node);
      const auto got_t = pg->comm_stats().per_collective.at("all_reduce");
      off_formula = std::abs(got_t.bytes_sent_inter_node - want.sent_inter_node) +
                    std::abs(got_t.bytes_received_inter_node - want.received_inter_node);
      std::printf("rank %d: %s sent %lld and received %lld bytes across nodes; the formula: %lld "
                  "and %lld\n",
                  r, algo.c_str(), static_cast<long long>(got_t.bytes_sent_inter_node),
                  static_cast<long long>(got_t.bytes_received_inter_node),
                  static_cast<long long>(want.sent_inter_node),
                  static_cast<long long>(want.received_inter_node));
    }
    const std::vector<float> sum = big.to_vector<float>();
    const float want = world * (world + 1) / 2.0f;
    const int64_t bad = std::count_if(sum.begin(), sum.end(), [&](float v) { return v != want; });
    std::printf("rank %d of %d on engine %s: DDP vs one process max rel diff %.3g; all_reduce of "
                "%lld floats: %lld wrong\n",
                r, world, argv[1], worst, static_cast<long long>(n), static_cast<long long>(bad));
    destroy_process_group();
    return worst <= 1e-5 && bad == 0 && off_formula == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "ddp_nodes: %s\n", e.what());
    return 1;
  }
}
