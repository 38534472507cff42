// horovod.cpp: hvd::init and friends, broadcast_parameters, and DistributedOptimizer's
// per-parameter hooks (see horovod.h).
// Ordering: collectives must be issued in the same order on every rank. Horovod runs a
// coordinator that negotiates which tensors are ready everywhere; here every rank runs the
// same model, so backward finishes the parameters in the same order on every rank and the
// hooks launch the all-reduces in that order (the assumption DDP's reducer makes too).
// Read next: tests/horovod/test_horovod.cpp (Horovod-style training == DDP training).
#include "parallel/horovod/horovod.h"

#include <algorithm>

#include "parallel/ddp_utils/rank_utils.h"

namespace dplab::parallel::hvd {

void init(const InitOptions& opts) {
  if (!is_initialized()) init_process_group(opts);
}
int rank() { return get_rank(); }
int size() { return get_world_size(); }
int local_rank() {
  try {
    return rank_info_from_env().local_rank;
  } catch (const Error&) {
    return get_rank();  // no launcher variables: ranks were given by hand, one node
  }
}
void shutdown() { destroy_process_group(); }

namespace {

ProcessGroup& group_or_default(ProcessGroup* pg) {
  if (pg) return *pg;
  DPLAB_CHECK(is_initialized(), "hvd: no process group: call hvd::init() first");
  return default_process_group();
}

void broadcast_from(const std::vector<Tensor>& tensors, int root, ProcessGroup& pg) {
  DPLAB_CHECK(root >= 0 && root < pg.size(),
              "hvd::broadcast_parameters: root_rank must lie in [0, {}), got {}", pg.size(), root);
  broadcast_tensors(pg, tensors, root);
}

}  // namespace

void broadcast_parameters(nn::Module& module, int root_rank, ProcessGroup* pg) {
  ProcessGroup& g = group_or_default(pg);
  broadcast_from(module.parameters(), root_rank, g);
  broadcast_from(module.buffers(), root_rank, g);
}

void broadcast_parameters(const StateDict& state, int root_rank, ProcessGroup* pg) {
  std::vector<Tensor> tensors;
  for (const auto& [name, t] : state) tensors.push_back(t);
  broadcast_from(tensors, root_rank, group_or_default(pg));
}

DistributedOptimizer::DistributedOptimizer(
    std::shared_ptr<optim::Optimizer> inner,
    const std::vector<std::pair<std::string, Tensor>>& named_parameters, Compression compression,
    std::shared_ptr<ProcessGroup> pg)
    : optim::Optimizer([&] {
        std::vector<Tensor> ps;
        for (const auto& [n, p] : named_parameters) ps.push_back(p);
        return ps;
      }()),
      inner_(std::move(inner)), compression_(compression), pg_(std::move(pg)) {
  DPLAB_CHECK(inner_ != nullptr, "hvd::DistributedOptimizer: the wrapped optimizer is null");
  if (!pg_) {
    group_or_default(nullptr);  // says to call hvd::init() when there is no group
    pg_ = default_process_group_handle();
  }
  // The wrapped optimizer must update exactly the parameters whose gradients we average.
  const auto& held = inner_->params();
  DPLAB_CHECK(
      held.size() == named_parameters.size(),
      "hvd::DistributedOptimizer: the optimizer holds {} parameters but {} named parameters were "
      "given",
      held.size(), named_parameters.size());
  for (const auto& [n, p] : named_parameters) {
    bool found =
        std::any_of(held.begin(), held.end(), [&](const Tensor& h) { return h.is_same(p); });
    DPLAB_CHECK(found,
                "hvd::DistributedOptimizer: parameter {} is not one the wrapped optimizer updates",
                n);
    names_.push_back(n);
  }
  lr_ = inner_->lr();
  pending_.resize(params_.size());
  averaged_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    std::weak_ptr<DistributedOptimizer*> self = self_;
    params_[i].register_post_accumulate_grad_hook([self, i](Tensor&) {
      if (auto s = self.lock(); s && *s) (*s)->on_gradient_ready(i);
    });
  }
}

void DistributedOptimizer::on_gradient_ready(size_t i) {
  DPLAB_CHECK(!pending_[i],
              "hvd::DistributedOptimizer: {} got a second gradient before step(): call "
              "step() (or synchronize()) after every backward",
              names_[i]);
  // The all-reduce works in place on .grad (or on its half copy): nothing writes .grad again
  // until the next backward, which comes after step() has waited.
  pending_[i] = all_reduce_average_async(*pg_, params_[i].grad(), compression_);
  averaged_[i] = false;
  ++launched_;
}

void DistributedOptimizer::synchronize() {
  std::vector<std::string> missing;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i]) {
      pending_[i]->wait();
      pending_[i].reset();
      averaged_[i] = true;
    } else if (params_[i].grad().defined() && !averaged_[i]) {
      missing.push_back(names_[i]);  // a gradient that never went through the hook
    }
  }
  DPLAB_CHECK(missing.empty(),
              "hvd::DistributedOptimizer: these gradients were not averaged (was backward "
              "run before the optimizer was built, or twice with a synchronize() in between?): {}",
              fmt::join(missing, ", "));
}

void DistributedOptimizer::step() {
  synchronize();
  inner_->set_lr(lr_);  // a scheduler drives this wrapper's lr
  inner_->step();
}

}  // namespace dplab::parallel::hvd
