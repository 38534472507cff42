// compression.cpp: the fp16 all-reduce as a Work that decompresses when waited on
// (see compression.h). Cost: one cast to half before (n reads, n/2 words written), the
// all-reduce of 2n bytes instead of 4n, one cast back and a scale after.
// Read next: tests/ddp_extensions/test_compression.cpp (traffic exactly halved, values kept).
#include "parallel/ddp/compression.h"

#include <mutex>

#include "framework/autograd/grad_mode.h"

namespace dplab::parallel {
namespace {

// Wraps the all-reduce of the half copy; the first wait() writes the average back into the
// float32 tensor. The reducer (or DistributedOptimizer) calls wait() from the training thread,
// so the decompression never runs concurrently with the backward pass touching `out`.
class DecompressWork : public Work {
 public:
  DecompressWork(WorkPtr inner, Tensor wire, Tensor out, int world)
      : inner_(std::move(inner)), wire_(std::move(wire)), out_(std::move(out)), world_(world) {}

  void wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    inner_->wait();  // rethrows the collective's error
    NoGradGuard no_grad;
    out_.copy_(wire_.to(DType::Float32));  // half -> float32 on out's device
    out_.mul_(1.0f / static_cast<float>(world_));
    wire_ = Tensor();  // the half buffer is no longer needed
    done_ = true;
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  mutable std::mutex mu_;
  WorkPtr inner_;
  Tensor wire_, out_;
  int world_;
  bool done_ = false;
};

}  // namespace

WorkPtr all_reduce_average_async(ProcessGroup& pg, Tensor t, Compression compression,
                                 std::optional<Algorithm> algo) {
  DPLAB_CHECK(
      t.defined() && is_floating(t.dtype()),
      "all_reduce_average_async: expected a float32, float16 or bfloat16 tensor, got {}",
      t.defined() ? std::string(dtype_name(t.dtype())) : std::string("an undefined tensor"));
  if (is_low_precision(t.dtype())) {
    // A 16-bit gradient (Apex O2, amp/master_weights.h) is on the wire as it is: half the
    // bytes with no cast. Divided by N first, then summed (PyTorch DDP's predivide for
    // half gradients): a sum of N loss-scaled gradients could pass float16's 65504, their
    // average would not. Dividing by a power of two is exact.
    NoGradGuard no_grad;
    t.mul_(1.0f / static_cast<float>(pg.size()));
    return pg.all_reduce_async(t, ReduceOp::Sum, algo);
  }
  if (compression == Compression::none) return pg.all_reduce_async(t, ReduceOp::Avg, algo);
  // Sum, not Avg, on the wire: the collective's Avg is float32-only, and dividing once after
  // decompression rounds once instead of in half precision.
  Tensor wire = t.detach().to(DType::Float16);
  WorkPtr inner = pg.all_reduce_async(wire, ReduceOp::Sum, algo);
  return std::make_shared<DecompressWork>(std::move(inner), std::move(wire), std::move(t),
                                          pg.size());
}

CommHook fp16_compress_hook(std::optional<Algorithm> algo) {
  return [algo](ProcessGroup& pg, Tensor& bucket) {
    return all_reduce_average_async(pg, bucket, Compression::fp16, algo);
  };
}

}  // namespace dplab::parallel
