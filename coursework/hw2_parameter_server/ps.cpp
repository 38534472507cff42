// ps.cpp: hw2, the parameter server's step. Your code replaces each // TODO the starter left.
// Words: the *master* (device 0) holds the model the optimizer updates; a *replica* on every
// other device computes on its *chunk* of the batch. Everything flows through the master.
#include <algorithm>

#include "ps.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace hw2 {

using namespace dplab;

std::vector<int64_t> chunk_sizes(int64_t batch, int n) {
  // BEGIN ASSIGNMENT: torch.chunk's rule (README section 2)
  const int64_t each = (batch + n - 1) / n;
  std::vector<int64_t> sizes;
  for (int64_t left = batch; left > 0; left -= each) sizes.push_back(std::min(each, left));
  return sizes;
  // END ASSIGNMENT
}

float ps_step(const std::vector<std::shared_ptr<nn::Module>>& replicas, const std::vector<Device>& devices,
              const Tensor& x, const Tensor& y, optim::Optimizer& opt, Traffic& traffic) {
  // BEGIN ASSIGNMENT: broadcast, scatter, forward, gather, loss, backward, reduce, step (README section 3)
  const Device master = devices[0];
  const std::vector<int64_t> sizes = chunk_sizes(x.shape()[0], static_cast<int>(devices.size()));
  const size_t used = sizes.size();  // a small batch may leave devices idle
  std::vector<Tensor> master_params = replicas[0]->parameters();
  // 1. broadcast the master's weights into the replicas that get a chunk
  for (size_t i = 1; i < used; ++i) {
    NoGradGuard no_grad;
    std::vector<Tensor> params = replicas[i]->parameters();
    for (size_t k = 0; k < params.size(); ++k) params[k].copy_(copy_to(master_params[k], devices[i], traffic));
  }
  // 2. scatter the batch; 3. forward each chunk on its device
  std::vector<Tensor> outputs;
  int64_t row = 0;
  for (size_t i = 0; i < used; ++i) {
    Tensor chunk = copy_to(x.narrow(row, sizes[i]), devices[i], traffic);
    for (Tensor p : replicas[i]->parameters()) p.set_grad({});
    outputs.push_back(replicas[i]->forward(chunk));
    row += sizes[i];
  }
  // 4. gather the outputs onto the master (new leaves there), 5. the loss on the master
  std::vector<Tensor> gathered;
  for (size_t i = 0; i < used; ++i) {
    Tensor g = copy_to(outputs[i].detach(), master, traffic);
    if (i == 0) g = outputs[0];  // the master's own output keeps its graph
    else g.requires_grad_();
    gathered.push_back(g);
  }
  opt.zero_grad();
  Tensor loss = cross_entropy(cat(gathered, 0), y);
  loss.backward();  // the master's replica gets its gradients; the others' outputs theirs
  // 6. scatter each output's gradient back, 7. backward on every other replica
  for (size_t i = 1; i < used; ++i) outputs[i].backward(copy_to(gathered[i].grad(), devices[i], traffic));
  // 8. sum the replicas' gradients onto the master, 9. step there
  for (size_t i = 1; i < used; ++i) {
    NoGradGuard no_grad;
    std::vector<Tensor> params = replicas[i]->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor g = copy_to(params[k].grad(), master, traffic);
      master_params[k].set_grad(add(master_params[k].grad(), g));
    }
  }
  opt.step();
  return loss.item();
  // END ASSIGNMENT
}

}  // namespace hw2
