// distributed_eval.cpp: gather-and-truncate, reduce-a-copy, and count-weighted metric sums.
// Shapes are checked across ranks before the all_gather (one small all_reduce), because a
// rank with a different row count would otherwise fail deep inside the transport.
// Read next: tutorials/12_distributed_eval.cpp.
#include "parallel/ddp_utils/distributed_eval.h"

#include <functional>

#include "framework/error.h"
#include "framework/ops/ops.h"

namespace dplab::parallel {

namespace {
// Max and min over ranks of a few int64 facts; equal max and min means every rank agrees.
// Cost: two all_reduces of facts.size() int64 values.
bool ranks_agree(ProcessGroup& pg, const std::vector<int64_t>& facts, std::vector<int64_t>* lo,
                 std::vector<int64_t>* hi) {
  Tensor mx = from_vector(facts, {static_cast<int64_t>(facts.size())});
  Tensor mn = mx.clone();
  pg.all_reduce(mx, ReduceOp::Max);
  pg.all_reduce(mn, ReduceOp::Min);
  *hi = mx.to_vector<int64_t>();
  *lo = mn.to_vector<int64_t>();
  return *hi == *lo;
}
}  // namespace

Tensor distributed_concat(ProcessGroup& pg, const Tensor& t, int64_t num_total_examples) {
  DPLAB_CHECK(t.defined() && t.dim() >= 1,
              "distributed_concat: expected a tensor with a batch dim 0, got {}",
              t.defined() ? shape_str(t.shape()) : std::string("an undefined tensor"));
  // Rows, dims, dtype and numel must match on every rank for all_gather to be well-formed.
  std::vector<int64_t> facts{t.size(0), t.dim(), static_cast<int64_t>(t.dtype()), t.numel()};
  std::vector<int64_t> lo, hi;
  if (!ranks_agree(pg, facts, &lo, &hi))
    DPLAB_FAIL("distributed_concat: ranks passed different tensors: rows from {} to {}, dims "
               "from {} to {}, numel from {} to {} (rank {} has {} {}); pad every rank to the "
               "same rows (SequentialDistributedSampler does)",
               lo[0], hi[0], lo[1], hi[1], lo[3], hi[3], pg.rank(), shape_str(t.shape()),
               dtype_name(t.dtype()));
  const int64_t gathered_rows = t.size(0) * pg.size();
  DPLAB_CHECK(num_total_examples >= 0 && num_total_examples <= gathered_rows,
              "distributed_concat: num_total_examples must be in [0, {}] ({} ranks x {} rows), "
              "got {}",
              gathered_rows, pg.size(), t.size(0), num_total_examples);

  std::vector<Tensor> parts;
  parts.reserve(static_cast<size_t>(pg.size()));
  for (int r = 0; r < pg.size(); ++r) parts.push_back(Tensor::empty(t.shape(), t.options()));
  pg.all_gather(parts, t.detach());
  // Rank order = dataset order for contiguous blocks; the padding sits at the very end.
  Tensor all = cat(parts, 0);
  return all.narrow(0, num_total_examples);
}

Tensor reduce_tensor(ProcessGroup& pg, const Tensor& t, ReduceOp op) {
  DPLAB_CHECK(t.defined(), "reduce_tensor: expected a defined tensor");
  Tensor copy = t.detach().clone();  // the caller's tensor (e.g. a loss in a graph) stays
  pg.all_reduce(copy, op);
  return copy;
}

void WeightedMetrics::add(const std::string& name, double value, int64_t count) {
  DPLAB_CHECK(count >= 0, "WeightedMetrics::add('{}'): expected a count >= 0, got {}", name, count);
  Sum& s = sums_[name];
  s.weighted += value * static_cast<double>(count);
  s.count += count;
}

double WeightedMetrics::local(const std::string& name) const {
  auto it = sums_.find(name);
  DPLAB_CHECK(it != sums_.end(), "WeightedMetrics: no metric named '{}'", name);
  return it->second.count ? it->second.weighted / static_cast<double>(it->second.count) : 0.0;
}

int64_t WeightedMetrics::local_count(const std::string& name) const {
  auto it = sums_.find(name);
  DPLAB_CHECK(it != sums_.end(), "WeightedMetrics: no metric named '{}'", name);
  return it->second.count;
}

std::map<std::string, double> WeightedMetrics::reduce(ProcessGroup& pg) const {
  // The names must agree, or the packed sums below would add loss to accuracy.
  std::string joined;
  for (const auto& [name, s] : sums_) joined += name + '\n';
  std::vector<int64_t> facts{static_cast<int64_t>(sums_.size()),
                             static_cast<int64_t>(std::hash<std::string>{}(joined) >> 1)};
  std::vector<int64_t> lo, hi;
  if (!ranks_agree(pg, facts, &lo, &hi))
    DPLAB_FAIL("WeightedMetrics::reduce: ranks added different metric names (from {} to {} "
               "names; rank {} has: {})",
               lo[0], hi[0], pg.rank(), joined.empty() ? "none" : joined);
  const int64_t k = static_cast<int64_t>(sums_.size());
  if (k == 0) return {};
  // Weighted sums in float32 (7 digits: ample for a mean), counts in int64 (exact).
  std::vector<float> weighted;
  std::vector<int64_t> counts;
  for (const auto& [name, s] : sums_) {
    weighted.push_back(static_cast<float>(s.weighted));
    counts.push_back(s.count);
  }
  Tensor w = from_vector(weighted, {k});
  Tensor c = from_vector(counts, {k});
  pg.all_reduce(w, ReduceOp::Sum);
  pg.all_reduce(c, ReduceOp::Sum);
  auto wv = w.to_vector<float>();
  auto cv = c.to_vector<int64_t>();
  std::map<std::string, double> out;
  size_t i = 0;
  for (const auto& [name, s] : sums_) {
    out[name] = cv[i] ? static_cast<double>(wv[i]) / static_cast<double>(cv[i]) : 0.0;
    ++i;
  }
  return out;
}

int64_t WeightedMetrics::global_count(ProcessGroup& pg, const std::string& name) const {
  Tensor c = from_vector(std::vector<int64_t>{local_count(name)}, {1});
  pg.all_reduce(c, ReduceOp::Sum);
  return c.item_int();
}

}  // namespace dplab::parallel
