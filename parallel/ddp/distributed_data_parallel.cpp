// distributed_data_parallel.cpp: construction-time checks and broadcast, per-forward
// buffer sync, and the reducer wiring (see distributed_data_parallel.h).
#include "parallel/ddp/distributed_data_parallel.h"

#include "parallel/ddp/compression.h"

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "parallel/comm/init.h"
#include "parallel/ddp_utils/rank_utils.h"

namespace dplab::parallel {

CommHook allreduce_hook(std::optional<Algorithm> algo) {
  return [algo](ProcessGroup& pg, Tensor& bucket) {
    // 16-bit buckets (Apex O2's model gradients): Avg is float32-only in the collectives,
    // so compression.cpp divides first and sums, at half the bytes of float32
    if (is_low_precision(bucket.dtype()))
      return all_reduce_average_async(pg, bucket, Compression::none, algo);
    return pg.all_reduce_async(bucket, ReduceOp::Avg, algo);
  };
}

namespace {

// Every rank must wrap the same architecture: compare parameter count and element total
// (min == max over ranks) before anything else, so a mismatch is an error, not a hang later.
void check_same_model_everywhere(ProcessGroup& pg, const std::vector<Tensor>& params) {
  int64_t count = static_cast<int64_t>(params.size()), elems = 0;
  for (const Tensor& p : params) elems += p.numel();
  Tensor mx = from_vector(std::vector<int64_t>{count, elems}, {2});
  Tensor mn = from_vector(std::vector<int64_t>{-count, -elems}, {2});
  pg.all_reduce(mx, ReduceOp::Max);
  pg.all_reduce(mn, ReduceOp::Max);
  auto hi = mx.to_vector<int64_t>(), lo = mn.to_vector<int64_t>();
  DPLAB_CHECK(
      hi[0] == -lo[0] && hi[1] == -lo[1],
      "DDP: ranks wrap different models: parameter counts range over [{}, {}] and element totals "
      "over [{}, {}] (rank {} has {} parameters, {} elements)",
      -lo[0], hi[0], -lo[1], hi[1], pg.rank(), count, elems);
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 DDPOptions opts)
    : module_(std::move(module)), opts_(std::move(opts)) {
  DPLAB_CHECK(module_ != nullptr, "DDP: the module is null");
  pg_ = opts_.process_group;
  if (!pg_) {
    DPLAB_CHECK(is_initialized(), "DDP: no process group: call init_process_group() first (or pass "
                                  "{{.process_group = ...}})");
    pg_ = default_process_group_handle();
  }
  auto named = module_->named_parameters();
  DPLAB_CHECK(!named.empty(), "DDP: the module has no parameters to synchronise");
  // With .device set every parameter must be there; without it a module may span several
  // devices (model parallelism) and the reducer forms buckets per device.
  if (opts_.device)
    for (const auto& [n, p] : named)
      DPLAB_CHECK(p.device() == *opts_.device,
                  "DDP: expected every parameter on {}, but {} is on {} (move "
                  "the module to its rank's device before wrapping it)",
                  *opts_.device, n, p.device());
  DPLAB_CHECK(opts_.bucket_cap_mb > 0, "DDP: bucket_cap_mb must be positive, got {}",
              opts_.bucket_cap_mb);
  register_module("module", module_);

  std::vector<Tensor> params;
  for (auto& [n, p] : named) params.push_back(p);
  check_same_model_everywhere(*pg_, params);
  broadcast_tensors(*pg_, params, 0);
  broadcast_tensors(*pg_, module_->buffers(), 0);
  build_reducer();
}

void DistributedDataParallel::build_reducer() {
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [n, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;  // frozen parameters are not reduced
    params.push_back(p);
    names.push_back(n);
  }
  CommHook hook = opts_.comm_hook ? opts_.comm_hook : allreduce_hook(opts_.algorithm);
  auto cap = static_cast<int64_t>(opts_.bucket_cap_mb * 1024 * 1024);
  reducer_ = std::make_unique<Reducer>(params, names, pg_, cap, opts_.find_unused_parameters,
                                       opts_.gradient_as_bucket_view, hook);
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  opts_.comm_hook = std::move(hook);
  build_reducer();
}

std::string DistributedDataParallel::name() const {
  return fmt::format("DistributedDataParallel(rank={}, world_size={}, buckets={})", pg_->rank(),
                     pg_->size(), reducer_->num_buckets());
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (opts_.broadcast_buffers && module_->is_training())
    broadcast_tensors(*pg_, module_->buffers(), 0);
  Tensor out = module_->forward(x);
  if (grad_enabled()) reducer_->prepare_for_backward(out);  // after: it walks out's graph
  return out;
}

}  // namespace dplab::parallel
