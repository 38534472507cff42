// ddp_checkpoint.cpp: rank 0 saves, the ranks agree it worked, everyone loads.
// The agreement steps are collectives carrying a success flag rather than bare barriers,
// so one rank's failure becomes an error on every rank instead of a hang until timeout.
// Read next: tutorials/09_ddp_checkpoint.cpp.
#include "parallel/ddp_utils/ddp_checkpoint.h"

#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/ddp/distributed_data_parallel.h"

namespace dplab::parallel {

nn::Module& unwrap_ddp(nn::Module& m) {
  if (auto* ddp = dynamic_cast<DistributedDataParallel*>(&m)) return ddp->module();
  return m;
}

const nn::Module& unwrap_ddp(const nn::Module& m) {
  return unwrap_ddp(const_cast<nn::Module&>(m));  // only reads; module() has no const form
}

void save_checkpoint_on_rank0(ProcessGroup& pg, const std::string& path, const nn::Module& model,
                              const optim::Optimizer* optimizer, Metadata extra) {
  std::exception_ptr failure;
  std::string what;
  if (pg.rank() == 0) {
    try {
      save_checkpoint(path, unwrap_ddp(model), optimizer, std::move(extra));
    } catch (const std::exception& e) {
      failure = std::current_exception();
      what = e.what();
    }
  }
  // The others block here until rank 0 has renamed the finished file into place.
  Tensor ok = from_vector(std::vector<int64_t>{failure ? 0 : 1}, {1});
  pg.broadcast(ok, 0);
  if (failure) std::rethrow_exception(failure);
  DPLAB_CHECK(ok.item_int() == 1,
              "save_checkpoint_on_rank0: rank 0 failed to write '{}' (its error is on rank 0); "
              "rank {} has nothing to load",
              path, pg.rank());
}

Metadata load_checkpoint_on_all_ranks(ProcessGroup& pg, const std::string& path, nn::Module& model,
                                      optim::Optimizer* optimizer,
                                      std::optional<Device> map_location) {
  nn::Module& inner = unwrap_ddp(model);
  Device where = map_location ? *map_location : Device("cpu");
  if (!map_location) {
    auto params = inner.parameters();
    if (!params.empty()) where = params.front().device();
  }
  Metadata meta;
  std::exception_ptr failure;
  try {
    meta = load_checkpoint(path, inner, optimizer, where);
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  std::vector<Tensor> flags;
  for (int r = 0; r < pg.size(); ++r) flags.push_back(Tensor::empty({1}, {.dtype = DType::Int64}));
  pg.all_gather(flags, from_vector(std::vector<int64_t>{failure ? 0 : 1}, {1}));
  if (failure) std::rethrow_exception(failure);
  std::string failed;
  for (int r = 0; r < pg.size(); ++r)
    if (flags[static_cast<size_t>(r)].item_int() != 1)
      failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  DPLAB_CHECK(failed.empty(),
              "load_checkpoint_on_all_ranks: rank(s) {} failed to load '{}'; "
              "rank {} loaded it but the ranks are no longer identical",
              failed, path, pg.rank());
  return meta;
}

}  // namespace dplab::parallel
