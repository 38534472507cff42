// grad_checkpoint.cpp: checkpoint_sequential, a Sequential cut into segments, each one
// autograd/checkpoint.h's checkpoint over its run of children.
// Read next: autograd/checkpoint.cpp.
#include "framework/nn/grad_checkpoint.h"

#include "framework/error.h"

namespace dplab {

Tensor checkpoint_sequential(nn::Sequential& seq, int segments, const Tensor& x) {
  const int n = static_cast<int>(seq.size());
  DPLAB_CHECK(
      segments >= 0 && segments <= n,
      "checkpoint_sequential: segments must be in [0, {}] (the Sequential's {} children), got {}",
      n, n, segments);
  if (segments == 0) return seq.forward(x);
  const int per = (n + segments - 1) / segments;
  // children [begin, end) as one function of the running activation
  auto run = [&seq](int begin, int end) {
    return [&seq, begin, end](const std::vector<Tensor>& in) {
      Tensor h = in[0];
      for (int i = begin; i < end; ++i) h = seq[i]->forward(h);
      return h;
    };
  };
  Tensor h = x;
  int begin = 0;
  for (; begin + per < n; begin += per) h = checkpoint(run(begin, begin + per), {h});
  return run(begin, n)({h});  // the last segment runs plainly
}

}  // namespace dplab
