// out_of_tree.cpp: a student's program that knows dplab only through pkg-config: it trains a
// tiny MLP and all-reduces on a one-rank process group, so the headers, every installed library and their
// dependencies all have to be found. Built and run by check_install.sh.
#include <cstdio>

#include "framework/dplab.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/hash_store.h"

using namespace dplab;

int main() {
  manual_seed(0);
  models::MLP mlp(4, {8}, 3);
  optim::SGD opt(mlp.parameters(), {.lr = 0.1});
  Tensor x = randn({16, 4});
  Tensor y = randint(0, 3, {16}, {.dtype = DType::Int64});
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(mlp.forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  // one rank's process group: the parallel library links too
  auto pg = parallel::create_process_group(std::make_shared<parallel::HashStore>(), 0, 1);
  Tensor g = ones({3});
  pg->all_reduce(g);
  std::printf("out-of-tree: loss %.4f -> %.4f, all_reduce on 1 rank: %.1f\n", first, last,
              g.to_vector<float>()[0]);
  return last < first && g.to_vector<float>()[0] == 1.0f ? 0 : 1;
}
