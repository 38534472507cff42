// ddp_nodes.cpp: DDP across nodes on one engine, started by dplab-run on every node
// (run_job.sh). Every rank trains tests/ddp's ToyModel job and compares its parameters with
// one process trained on the whole batch (ddp_reference.h, tolerance 1e-5 as tests/ddp);
// then it all-reduces a 4 MiB tensor and checks the sum, so that the job's bytes must cross
// the nodes' links (run_job.sh --min-link-bytes asserts they did: ranks in namespaces
// share /dev/shm, and an engine that quietly went through it would otherwise pass).
//   ddp_nodes ENGINE        (ENGINE as init_process_group's: gloo, ring, star, ...)
// Exit 0 equal, 1 different or failed; a refused engine's message goes to stderr.
// Read next: run_job.sh, tests/ddp/ddp_reference.h.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "framework/error.h"
#include "parallel/comm/init.h"
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
    auto pg = init_process_group({.engine = argv[1]});
    const int r = pg->rank(), world = pg->size();
    const Params expected = single_process(world, 1);
    manual_seed(r == 0 ? 0 : 1000 + r);  // DDP's broadcast must make the replicas equal
    auto model = std::make_shared<models::ToyModel>();
    DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.0001, .process_group = pg});
    optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      ddp_micro_batch(ddp, s, world, r, true);
      opt.step();
    }
    const Params got = params_of(*model);
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k)
      for (size_t i = 0; i < got[k].size(); ++i)
        worst = std::max(worst, std::abs(double(got[k][i]) - expected[k][i]) /
                                    std::max(1.0, std::abs(double(expected[k][i]))));
    // 4 MiB of (rank + 1): every element must come back as world * (world + 1) / 2
    const int64_t n = (4 << 20) / 4;
    Tensor big = full({n}, static_cast<double>(r + 1));
    pg->all_reduce(big);
    const std::vector<float> sum = big.to_vector<float>();
    const float want = world * (world + 1) / 2.0f;
    const int64_t bad = std::count_if(sum.begin(), sum.end(), [&](float v) { return v != want; });
    std::printf("rank %d of %d on engine %s: DDP vs one process max rel diff %.3g; all_reduce of "
                "%lld floats: %lld wrong\n",
                r, world, argv[1], worst, static_cast<long long>(n), static_cast<long long>(bad));
    destroy_process_group();
    return worst <= 1e-5 && bad == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "ddp_nodes: %s\n", e.what());
    return 1;
  }
}
