/*
 * zero_redundancy_optimizer.cpp: one ZeRO step, written out over the ProcessGroup's
 * reduce_scatter and all_gather (which run the ring of algorithms/ring.cpp).
 *
 * Words. N ranks; parameter i has P_i elements, flattened. Its *shards* are the ring's
 * chunks: shard j is [chunk_offset(P_i, N, j), + chunk_elems(P_i, N, j)), so the first
 * P_i mod N shards are one element longer (uneven shards, nothing to assume). A collective
 * needs N blocks of one size, so each shard travels *padded* to c_i = ceil(P_i / N) elements
 * (zeros after a short shard). Rank r *owns* shard r: only it keeps that shard's optimizer
 * state, and only it steps it.
 *
 * A step, for each parameter i in order (every rank in the same order):
 *   1. reduce-scatter (Avg) the gradient's N padded shards: rank r receives the average of
 *      shard r over all ranks, c_i elements. Stage 2 frees the full gradient here.
 *   2. the inner optimizer (SGD or Adam, unchanged) steps shard r, a view into the parameter.
 *   3. all-gather the N updated shards: every rank writes the others' into its parameter.
 * (1) is skipped when DDP has already averaged the gradient (gradients_averaged). Stage 2 on
 * its own runs (1) during backward, as soon as each gradient is final (a post-accumulate
 * hook), so that at most one full gradient exists at a time.
 *
 * Cost per rank, per parameter: the ring's reduce-scatter sends (N-1) c_i elements and
 * receives as many; the all-gather the same. Together 2(N-1) c_i = 2(N-1)/N * (N c_i): the
 * bytes of one ring all-reduce of the padded gradient, what DDP moves. ZeRO is free in
 * bandwidth; it costs latency instead: two collectives per parameter, each N-1 ring steps
 * with their handshakes, where DDP's buckets batch many parameters into one all-reduce.
 * Memory per rank (Adam, P parameters): params 4P, gradients 4P (stage 1) or 4P/N kept
 * after the step (stage 2), optimizer state 8P/N.
 * Read next: tutorials/18_zero.md (the table measured), tests/zero/test_zero.cpp.
 */
#include "parallel/zero/zero_redundancy_optimizer.h"

#include <charconv>

#include <string>

#include "framework/autograd/grad_mode.h"
#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/comm/init.h"

namespace dplab::parallel {
namespace {

std::string key(size_t i, const std::string& name) {
  return "state." + std::to_string(i) + "." + name;
}

bool is_adam(const InnerOptions& o) { return std::holds_alternative<optim::AdamOptions>(o); }

// The per-parameter state tensors the inner optimizer keeps, by name.
std::vector<std::string> state_names(const InnerOptions& o) {
  if (is_adam(o)) return {"exp_avg", "exp_avg_sq"};
  if (std::get<optim::SGDOptions>(o).momentum != 0.0) return {"momentum_buffer"};
  return {};
}

// A Work that is done when it is made: the local-gradients hook has nothing to wait for.
class DoneWork : public Work {
 public:
  void wait() override {}
  bool is_completed() const override { return true; }
};

}  // namespace

CommHook zero_local_gradients_hook() {
  return [](ProcessGroup&, Tensor&) -> WorkPtr { return std::make_shared<DoneWork>(); };
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, InnerOptions inner,
                                                 ZeroOptions opts)
    : Optimizer(std::move(params)), inner_options_(inner), opts_(std::move(opts)) {
  DPLAB_CHECK(
      opts_.stage == 1 || opts_.stage == 2,
      "ZeroRedundancyOptimizer: stage must be 1 (optimizer state) or 2 (and gradients), got {}",
      opts_.stage);
  pg_ = opts_.process_group
            ? opts_.process_group
            : std::shared_ptr<ProcessGroup>(&default_process_group(), [](ProcessGroup*) {});
  const int n = pg_->size(), r = pg_->rank();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    DPLAB_CHECK(p.defined() && p.dtype() == DType::Float32,
                "ZeroRedundancyOptimizer: parameter {} must be a float32 tensor", i);
    DPLAB_CHECK(
        p.device() == params_[0].device(),
        "ZeroRedundancyOptimizer: all parameters must be on one device: parameter 0 is on {}, "
        "parameter {} on {}",
        params_[0].device(), i, p.device());
    if (chunk_elems(p.numel(), n, r) == 0) continue;  // fewer elements than ranks: nothing here
    owned_.push_back(i);
    // my shard, a view: the inner optimizer's update lands in the parameter itself
    shards_.push_back(
        p.detach().flatten().narrow(chunk_offset(p.numel(), n, r), chunk_elems(p.numel(), n, r)));
  }
  if (is_adam(inner)) {
    const auto& o = std::get<optim::AdamOptions>(inner);
    inner_ = std::make_unique<optim::Adam>(shards_, o);
    lr_ = o.lr;
  } else {
    const auto& o = std::get<optim::SGDOptions>(inner);
    inner_ = std::make_unique<optim::SGD>(shards_, o);
    lr_ = o.lr;
  }
  progress_.assign(params_.size(), 0);
  reduced_.assign(params_.size(), Tensor());
  // Stage 2 on its own reduce-scatters each gradient as soon as backward has finished it, and
  // frees it: at most one full gradient lives at a time. Every rank's backward finishes the
  // parameters in one order (the engine's), so the collectives pair up.
  if (opts_.stage == 2 && !opts_.gradients_averaged && n > 1) {
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].requires_grad())
        params_[i].register_post_accumulate_grad_hook([self = self_, i](Tensor&) {
          if (*self) (*self)->reduce_gradient(i);
        });
  }
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() { *self_ = nullptr; }

int64_t ZeroRedundancyOptimizer::shard_offset(size_t i) const {
  return chunk_offset(params_.at(i).numel(), pg_->size(), pg_->rank());
}
int64_t ZeroRedundancyOptimizer::shard_numel(size_t i) const {
  return chunk_elems(params_.at(i).numel(), pg_->size(), pg_->rank());
}
int64_t ZeroRedundancyOptimizer::padded_numel(size_t i) const {
  return chunk_elems(params_.at(i).numel(), pg_->size(), 0);  // shard 0 is the longest
}

Tensor ZeroRedundancyOptimizer::padded_chunk(const Tensor& flat, int j) const {
  const int n = pg_->size();
  const int64_t len = chunk_elems(flat.numel(), n, j), c = chunk_elems(flat.numel(), n, 0);
  Tensor piece = flat.narrow(chunk_offset(flat.numel(), n, j), len);
  if (len == c) return piece;  // a view: no copy
  Tensor padded = zeros({c}, flat.options());
  if (len > 0) padded.narrow(0, len).copy_(piece);
  return padded;
}

// 1. reduce-scatter parameter i's gradient: block j is shard j of my gradient, and I receive
// shard r averaged over the ranks. Stage 2 frees the full gradient at once.
void ZeroRedundancyOptimizer::reduce_gradient(size_t i) {
  DPLAB_CHECK(
      !reduced_[i].defined(),
      "ZeroRedundancyOptimizer stage 2 (rank {}): parameter {} got a second gradient before "
      "step(); "
      "stage 2 reduce-scatters each gradient during backward, so it cannot accumulate several "
      "backward passes: use stage 1 for gradient accumulation",
      pg_->rank(), i);
  NoGradGuard no_grad;
  const int n = pg_->size();
  Tensor flat_grad = params_[i].grad().flatten();
  const int64_t len = shard_numel(i), c = padded_numel(i);
  Tensor mine;  // the average gradient of my shard, len elements
  if (opts_.gradients_averaged || n == 1) {
    mine = flat_grad.narrow(shard_offset(i), len).clone();
  } else {
    std::vector<Tensor> blocks(n);
    for (int j = 0; j < n; ++j) blocks[j] = padded_chunk(flat_grad, j);
    Tensor out = Tensor::empty({c}, flat_grad.options());
    pg_->reduce_scatter(out, blocks, ReduceOp::Avg);
    mine = len == c ? out : out.narrow(0, len).clone();
  }
  flat_grad = Tensor();
  if (opts_.stage == 2) params_[i].set_grad(Tensor());  // the full gradient is freed now
  reduced_[i] = mine;
}

void ZeroRedundancyOptimizer::step() {
  for (size_t i = 0; i < params_.size(); ++i)
    DPLAB_CHECK(reduced_[i].defined() || params_[i].grad().defined(),
                "ZeroRedundancyOptimizer (rank {}): parameter {} has no gradient; every rank must "
                "produce every gradient before step() (leave frozen parameters out)",
                pg_->rank(), i);
  NoGradGuard no_grad;
  const int n = pg_->size(), r = pg_->rank();
  inner_->set_lr(lr_);  // a scheduler sets ours
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!reduced_[i].defined()) reduce_gradient(i);       // not yet done during backward
    if (opts_.stage == 2) params_[i].set_grad(Tensor());  // (DDP may have written it back)
  }
  for (size_t k = 0; k < owned_.size(); ++k) shards_[k].set_grad(reduced_[owned_[k]]);
  for (Tensor& g : reduced_) g = Tensor();
  // 2. the inner optimizer steps my shards, in place inside the parameters
  inner_->step();
  for (auto& p : progress_) ++p;
  if (opts_.stage == 1)
    for (Tensor& s : shards_) s.set_grad(Tensor());  // stage 1 keeps the full .grad instead
  // 3. all-gather: every rank's updated shard into every rank's parameter
  for (size_t i = 0; i < params_.size() && n > 1; ++i) {
    Tensor flat = params_[i].detach().flatten();
    const int64_t c = padded_numel(i);
    std::vector<Tensor> gathered(n);
    for (int j = 0; j < n; ++j) gathered[j] = Tensor::empty({c}, flat.options());
    pg_->all_gather(gathered, padded_chunk(flat, r));
    for (int j = 0; j < n; ++j) {
      const int64_t len = chunk_elems(flat.numel(), n, j);
      if (j != r && len > 0)
        flat.narrow(chunk_offset(flat.numel(), n, j), len).copy_(gathered[j].narrow(0, len));
    }
  }
}

int64_t ZeroRedundancyOptimizer::optimizer_state_bytes() const { return inner_->state_bytes(); }

int64_t ZeroRedundancyOptimizer::gradient_shard_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& s : shards_)
    if (s.grad().defined()) bytes += s.grad().nbytes();
  return bytes;
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to_rank) {
  const int n = pg_->size(), r = pg_->rank();
  DPLAB_CHECK(to_rank >= 0 && to_rank < n,
              "consolidate_state_dict: to_rank must be in [0, {}), got {}", n, to_rank);
  StateDict mine;
  Metadata inner_meta;
  inner_->state_dict(mine, inner_meta);
  StateDict full;
  Metadata meta;
  for (const auto& [k, v] : inner_meta)
    if (k.rfind("state.", 0) != 0) meta[k] = v;
  meta["optim.num_params"] = std::to_string(params_.size());
  size_t k = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool owned = k < owned_.size() && owned_[k] == i;
    const Tensor& p = params_[i];
    if (progress_[i] > 0) {
      if (is_adam(inner_options_)) meta[key(i, "step")] = std::to_string(progress_[i]);
      for (const std::string& name : state_names(inner_options_)) {
        // each rank sends its shard of this state, padded to c; to_rank lays them side by side
        const int64_t c = padded_numel(i);
        Tensor piece = zeros({c}, p.options());
        if (owned) piece.narrow(0, shard_numel(i)).copy_(mine.at(key(k, name)));
        std::vector<Tensor> pieces;  // filled on to_rank only
        if (r == to_rank)
          for (int j = 0; j < n; ++j) pieces.push_back(Tensor::empty({c}, p.options()));
        pg_->gather(pieces, piece, to_rank);
        if (r != to_rank) continue;
        Tensor whole = Tensor::empty(p.shape(), p.options());
        Tensor flat = whole.flatten();
        for (int j = 0; j < n; ++j) {
          const int64_t len = chunk_elems(p.numel(), n, j);
          if (len > 0)
            flat.narrow(chunk_offset(p.numel(), n, j), len).copy_(pieces[j].narrow(0, len));
        }
        full.insert(key(i, name), whole);
      }
    }
    if (owned) ++k;
  }
  have_consolidated_ = r == to_rank;
  if (have_consolidated_) {
    consolidated_ = std::move(full);
    consolidated_meta_ = std::move(meta);
  }
}

void ZeroRedundancyOptimizer::state_dict(StateDict& tensors, Metadata& meta) const {
  DPLAB_CHECK(
      have_consolidated_,
      "ZeroRedundancyOptimizer::state_dict on rank {}: call consolidate_state_dict(to_rank) on "
      "every rank first, then state_dict on to_rank (this rank holds only its shard)",
      pg_->rank());
  for (const auto& [k, t] : consolidated_) tensors.insert(k, t);
  for (const auto& [k, v] : consolidated_meta_) meta[k] = v;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& tensors, const Metadata& meta) {
  const std::string type = is_adam(inner_options_) ? "Adam" : "SGD";
  DPLAB_CHECK(
      meta.contains("optim.type") && meta.at("optim.type") == type,
      "ZeroRedundancyOptimizer::load_state_dict: expected a {} state dict, got optim.type \"{}\"",
      type, meta.contains("optim.type") ? meta.at("optim.type") : "(missing)");
  DPLAB_CHECK(
      meta.contains("optim.num_params") &&
          meta.at("optim.num_params") == std::to_string(params_.size()),
      "ZeroRedundancyOptimizer::load_state_dict: expected {} parameters, the state dict has {}",
      params_.size(),
      meta.contains("optim.num_params") ? meta.at("optim.num_params") : "(missing)");
  StateDict inner;
  Metadata inner_meta;
  for (const auto& [k, v] : meta)
    if (k.rfind("state.", 0) != 0) inner_meta[k] = v;
  inner_meta["optim.num_params"] = std::to_string(owned_.size());
  std::vector<int64_t> progress(params_.size(), 0);
  size_t k = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool owned = k < owned_.size() && owned_[k] == i;
    for (const std::string& name : state_names(inner_options_)) {
      if (!tensors.contains(key(i, name))) continue;
      const Tensor& whole = tensors.at(key(i, name));
      DPLAB_CHECK(whole.shape() == params_[i].shape(),
                  "ZeroRedundancyOptimizer::load_state_dict: \"{}\" "
                  "has shape {}, the parameter {}",
                  key(i, name), shape_str(whole.shape()), shape_str(params_[i].shape()));
      progress[i] = 1;
      if (owned)
        inner.insert(key(k, name), whole.flatten()
                                       .narrow(shard_offset(i), shard_numel(i))
                                       .contiguous_copy_on(params_[i].device()));
    }
    if (meta.contains(key(i, "step"))) {
      const std::string& step = meta.at(key(i, "step"));
      int64_t v = 0;
      auto [end, ec] = std::from_chars(step.data(), step.data() + step.size(), v);
      DPLAB_CHECK(!step.empty() && ec == std::errc() && end == step.data() + step.size() && v >= 0,
                  "ZeroRedundancyOptimizer::load_state_dict: \"{}\" should be a step count (an "
                  "integer >= 0), got \"{}\"",
                  key(i, "step"), step.substr(0, 64));
      progress[i] = v;
      if (owned) inner_meta[key(k, "step")] = meta.at(key(i, "step"));
    }
    if (owned) ++k;
  }
  inner_->load_state_dict(inner, inner_meta);
  lr_ = inner_->lr();
  progress_ = std::move(progress);
}

}  // namespace dplab::parallel
