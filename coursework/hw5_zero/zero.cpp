// zero.cpp: hw5, ZeRO stage 1. Your code replaces the // TODO the starter left in step().
// Words: the parameters, laid end to end, form one flat vector padded to N equal *shards*;
// rank r owns shard r: it keeps that shard's optimizer state and updates that shard only.
#include "zero.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace hw5 {

using namespace dplab;
using dplab::parallel::ReduceOp;

Zero1SGD::Zero1SGD(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, float lr, float momentum)
    : params_(std::move(params)), pg_(std::move(pg)), lr_(lr), momentum_(momentum) {
  int64_t total = 0;
  for (const Tensor& p : params_) total += p.numel();
  const int n = pg_->size();
  shard_ = (total + n - 1) / n;  // padded to shard_ * n
}

void Zero1SGD::step() {
  // BEGIN ASSIGNMENT: reduce-scatter the gradients, update my shard with momentum, all-gather (README sections 2-4)
  NoGradGuard no_grad;
  const int n = pg_->size(), r = pg_->rank();
  const int64_t padded = shard_ * n;
  // 1. reduce-scatter: my shard of the average gradient (each rank sends N-1 shards, gets N-1)
  const Tensor grads = flatten_grads(params_, padded);
  std::vector<Tensor> pieces;
  for (int i = 0; i < n; ++i) pieces.push_back(grads.narrow(i * shard_, shard_));
  Tensor my_grad = zeros({shard_});
  pg_->reduce_scatter(my_grad, pieces, ReduceOp::Avg);
  // 2. SGD with momentum on my shard only: buf = momentum * buf + g (buf = g at the first
  //    step, as PyTorch does), p -= lr * buf
  if (!momentum_buffer_.defined()) momentum_buffer_ = clone(my_grad);
  else momentum_buffer_ = add(mul_scalar(momentum_buffer_, momentum_), my_grad);
  const Tensor values = flatten_values(params_, padded);
  Tensor my_values = sub(values.narrow(r * shard_, shard_), mul_scalar(momentum_buffer_, lr_));
  // 3. all-gather: every rank's updated shard, to every rank
  std::vector<Tensor> shards;
  for (int i = 0; i < n; ++i) shards.push_back(zeros({shard_}));
  pg_->all_gather(shards, my_values);
  unflatten_values(cat(shards), params_);
  // END ASSIGNMENT
}

}  // namespace hw5
