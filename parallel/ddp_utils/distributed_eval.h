// distributed_eval.h: evaluation split over ranks, with results that equal one process.
//   SequentialDistributedSampler sampler(n, world, rank);   // contiguous, padded blocks
//   ... each rank predicts its block: preds [m, ...] ...
//   Tensor all = distributed_concat(pg, preds, n);            // [n, ...] in dataset order
// and metrics averaged correctly when ranks saw different numbers of real examples:
//   WeightedMetrics m; m.add("loss", batch_mean_loss, batch_size);
//   std::map<std::string, double> avg = m.reduce(pg);         // sum(value*count) / sum(count)
// Read next: distributed_sampler.h; tutorials/12_distributed_eval.cpp uses all of it.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "framework/tensor/tensor.h"
#include "parallel/comm/process_group.h"

namespace dplab::parallel {

// all_gather of every rank's `t` (same shape on every rank: [m, ...]), concatenated in rank
// order along dim 0, then truncated to the first num_total_examples rows, dropping the
// padding SequentialDistributedSampler appended. Cost: one all_gather, every rank receives
// (R-1) * m rows. Throws if ranks pass different shapes or dtypes (naming both), or if
// num_total_examples is outside [0, R * m].
Tensor distributed_concat(ProcessGroup& pg, const Tensor& t, int64_t num_total_examples);

// An all_reduce of a copy: `t` is left as it was (Avg by default, as metrics want).
Tensor reduce_tensor(ProcessGroup& pg, const Tensor& t, ReduceOp op = ReduceOp::Avg);

// Metrics kept as (sum of value * count, sum of count) per name. Sums, not means, travel:
// averaging the ranks' means would weight a rank with 1 real example (the rest padding) as
// much as one with 2,500. Every rank must add the same names (not the same number of times).
class WeightedMetrics {
 public:
  // value is a mean over `count` examples (a batch's mean loss, its accuracy in [0, 1]).
  void add(const std::string& name, double value, int64_t count);
  // This rank's own average (no communication).
  double local(const std::string& name) const;
  int64_t local_count(const std::string& name) const;
  // The average over all ranks' examples: sum over ranks of value*count / sum of counts.
  // Collective: every rank calls it with the same names, else Error naming the mismatch.
  std::map<std::string, double> reduce(ProcessGroup& pg) const;
  // The total example count over ranks, for printing ("on 10000 examples").
  int64_t global_count(ProcessGroup& pg, const std::string& name) const;

 private:
  struct Sum {
    double weighted = 0.0;
    int64_t count = 0;
  };
  std::map<std::string, Sum> sums_;  // ordered by name, so every rank packs the same layout
};

}  // namespace dplab::parallel
