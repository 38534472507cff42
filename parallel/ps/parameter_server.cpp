/*
 * parameter_server.cpp: one step of the sharded parameter server, written out over the
 * ProcessGroup's ps_push and ps_pull (algorithms/ps.cpp).
 *
 * Words: P parameters flattened in registration order into one buffer, flat_ (a worker's
 * holds all P; a separate server's only its shard); S shards, shard s held by rank
 * plan_.servers[s]; W workers.
 *   1. a worker copies its gradients into flat_;
 *   2. push: server s's part of flat_ becomes the sum of the W workers' shard s;
 *   3. server s divides it by W (the average DDP would compute) and hands it to the inner
 *      optimizer as the gradient of master_, its own float32 copy of shard s, and steps;
 *      the updated master_ goes back into its part of flat_;
 *   4. pull: every worker's flat_ gets every shard from its server; the worker copies flat_
 *      into its parameters.
 * SGD and Adam update each element from its own gradient and state only, so stepping a flat
 * shard that cuts across tensors is the same arithmetic as stepping the tensors.
 *
 * Memory: a worker holds its model (4P bytes), its gradients (4P) and flat_ (4P, DDP's
 * buckets' role); server s adds master_ (4·P/S) and the optimizer state of its shard only
 * (SGD with momentum 4·P/S, Adam 8·P/S); a separate server holds just those and flat_ (4·P/S).
 * Cost per step: ps_push + ps_pull, cost.h's ps_push_cost: with S = N co-located, the bytes
 * of one ring all-reduce; with S = 1, the star's.
 * Read next: algorithms/ps.cpp, tests/ps/test_parameter_server.cpp.
 */
#include "parallel/ps/parameter_server.h"

#include "framework/autograd/grad_mode.h"
#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/comm/init.h"

namespace dplab::parallel {

namespace {

// Every rank must pass the same parameters: a rank with another count or total would cut
// other shards and wait on messages that never come. One all-reduce (max of x and of -x)
// finds a mismatch on every rank before any shard moves.
void check_same_parameters(ProcessGroup& pg, int64_t count, int64_t elems) {
  Tensor t = from_vector(std::vector<int64_t>{count, elems, -count, -elems}, {4});
  pg.all_reduce(t, ReduceOp::Max);
  const auto v = t.to_vector<int64_t>();
  DPLAB_CHECK(v[0] == -v[2] && v[1] == -v[3],
              "ParameterServer: every rank must pass the same parameters; rank {} has {} "
              "tensors of {} elements, but the ranks range over {}..{} tensors and {}..{} "
              "elements",
              pg.rank(), count, elems, -v[2], v[0], -v[3], v[1]);
}

}  // namespace

ParameterServer::ParameterServer(std::vector<Tensor> params, InnerOptions inner, PsOptions opts)
    : Optimizer(std::move(params)) {
  pg_ = opts.process_group ? opts.process_group : default_process_group_handle();
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    DPLAB_CHECK(p.defined() && p.dtype() == DType::Float32,
                "ParameterServer: parameter {} must be a float32 tensor", i);
    DPLAB_CHECK(p.device() == params_[0].device(),
                "ParameterServer: all parameters must be on one device: parameter 0 is on {}, "
                "parameter {} on {}",
                params_[0].device(), i, p.device());
    total += p.numel();
  }
  const int n = pg_->size(), r = pg_->rank();
  if (n > 1) check_same_parameters(*pg_, static_cast<int64_t>(params_.size()), total);
  plan_ = make_server_plan(total, n, opts.servers, opts.colocated);
  const TensorOptions where{.device =
                                params_.empty() ? Device(DeviceKind::CPU) : params_[0].device()};
  NoGradGuard no_grad;
  // Everyone starts from the first worker's weights (rank 0: separate servers are the last
  // ranks). A separate server takes the whole buffer once, keeps its shard and lets go.
  Tensor start = zeros({total}, where);
  if (r == 0) {
    int64_t off = 0;
    for (const Tensor& p : params_) {
      start.narrow(off, p.numel()).copy_(p.detach().flatten());
      off += p.numel();
    }
  }
  if (n > 1) pg_->broadcast(start, 0);
  if (is_worker()) {
    int64_t off = 0;
    for (Tensor& p : params_) {
      p.detach().flatten().copy_(start.narrow(off, p.numel()));
      off += p.numel();
    }
  }
  flat_ = is_worker() ? start : Tensor();
  const int mine = plan_.shard_of(r);
  if (mine >= 0) {
    master_ = start.narrow(plan_.shard_offset(mine), plan_.shard_elems(mine)).clone();
    master_.requires_grad_();
    if (!is_worker()) flat_ = zeros({plan_.shard_elems(mine)}, where);
    if (std::holds_alternative<optim::AdamOptions>(inner)) {
      const auto& o = std::get<optim::AdamOptions>(inner);
      inner_ = std::make_unique<optim::Adam>(std::vector<Tensor>{master_}, o);
      lr_ = o.lr;
    } else {
      const auto& o = std::get<optim::SGDOptions>(inner);
      inner_ = std::make_unique<optim::SGD>(std::vector<Tensor>{master_}, o);
      lr_ = o.lr;
    }
  } else {
    lr_ = std::visit([](const auto& o) { return o.lr; }, inner);
  }
  // a separate server needed the parameters for their shapes only: let them go, so that it
  // holds just its shard (the caller may drop its model)
  if (!is_worker()) params_.clear();
}

int ParameterServer::worker_index() const {
  const int r = pg_->rank();
  DPLAB_CHECK(is_worker(), "ParameterServer: rank {} is a separate server, not a worker", r);
  int index = 0;
  for (int q = 0; q < r; ++q) index += plan_.is_worker(q) ? 1 : 0;
  return index;
}

void ParameterServer::step() {
  NoGradGuard no_grad;
  const int r = pg_->rank();
  // 1. my gradients into the flat buffer
  if (is_worker()) {
    int64_t off = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i];
      DPLAB_CHECK(p.grad().defined(),
                  "ParameterServer (rank {}): parameter {} has no gradient; every worker must "
                  "produce every gradient before step() (leave frozen parameters out)",
                  r, i);
      flat_.narrow(off, p.numel()).copy_(p.grad().flatten());
      off += p.numel();
    }
  }
  // 2. push: my shard (if I serve one) now holds the sum over the workers
  pg_->ps_push(flat_, plan_);
  // 3. the server steps its shard with the average gradient
  const int mine = plan_.shard_of(r);
  if (mine >= 0 && plan_.shard_elems(mine) > 0) {
    Tensor part = flat_.narrow(plan_.local_offset(r, mine), plan_.shard_elems(mine));
    master_.set_grad(mul_scalar(part, 1.0f / float(workers())));
    inner_->set_lr(lr_);  // a scheduler sets ours
    inner_->step();
    part.copy_(master_.detach());
  }
  // 4. pull: every shard's new weights into my buffer, then into my parameters
  pg_->ps_pull(flat_, plan_);
  if (is_worker()) {
    int64_t off = 0;
    for (Tensor& p : params_) {
      p.detach().flatten().copy_(flat_.narrow(off, p.numel()));
      off += p.numel();
    }
  }
}

int64_t ParameterServer::shard_weight_bytes() const {
  return master_.defined() ? master_.nbytes() : 0;
}

int64_t ParameterServer::optimizer_state_bytes() const {
  return inner_ ? inner_->state_bytes() : 0;
}

void ParameterServer::state_dict(StateDict&, Metadata&) const {
  DPLAB_FAIL("ParameterServer: the optimizer state lives on the {} servers, one shard each; "
             "saving it is not supported: checkpoint the model (every worker holds the current "
             "weights after step()), or train with DDP / ZeroRedundancyOptimizer to save state",
             plan_.count());
}

void ParameterServer::load_state_dict(const StateDict&, const Metadata&) {
  DPLAB_FAIL("ParameterServer: loading optimizer state is not supported (it lives on the "
             "servers, one shard each); construct it afresh from the loaded model");
}

}  // namespace dplab::parallel
