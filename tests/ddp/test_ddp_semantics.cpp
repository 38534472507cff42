// DDP's semantics as PyTorch users know them, each observed rather than assumed:
// overlap (a bucket's all-reduce starts while backward still runs), overlap that survives an
// unused layer (find_unused_parameters walks the graph after forward), an unused parameter's
// gradient over several steps, buckets rebuilt in the order gradients became ready,
// broadcast_buffers on and off, and gradient_as_bucket_view's memory.
// Order is observed through hooks, never through timing: each test registers its own
// post-accumulate hooks BEFORE wrapping the model, so they fire before DDP's, and wraps the
// comm hook to log each launch.
#include <doctest/doctest.h>

#include <algorithm>

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::borrow;
using dplab::parallel::testing::Partly;
using dplab::parallel::testing::run_threads;

namespace {

constexpr int kLaunch = -1;  // an event: a bucket's reduction was started

// Logs "parameter p's gradient is final" (its index) for every parameter of `m`; call before
// wrapping m in DDP so that the entry precedes whatever DDP's own hook launches.
void log_gradients(nn::Module& m, std::vector<int>& events) {
  int i = 0;
  for (Tensor p : m.parameters())
    p.register_post_accumulate_grad_hook([&events, k = i++](Tensor&) { events.push_back(k); });
}

CommHook logging_hook(std::vector<int>& events) {
  return [&events, inner = allreduce_hook()](ProcessGroup& pg, Tensor& bucket) {
    CHECK(in_backward());
    events.push_back(kLaunch);
    return inner(pg, bucket);
  };
}

// Index of the first launch and of the last gradient in an event log.
std::pair<long, long> first_launch_last_grad(const std::vector<int>& ev) {
  long launch = std::find(ev.begin(), ev.end(), kLaunch) - ev.begin();
  long last = -1;
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i] != kLaunch) last = static_cast<long>(i);
  return {launch, last};
}

// fc1 -> relu -> fc2, and a layer registered last that forward never calls.
struct Branchy : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, unused;
  Branchy() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 4));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4, 2));
    unused = register_module("unused", std::make_shared<nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

}  // namespace

TEST_CASE("overlap: the first bucket's all-reduce starts before backward has finished") {
  run_threads(2, [&](ProcessGroup& pg) {
    std::vector<int> events;
    auto model = std::make_shared<models::ToyModel>();
    log_gradients(*model, events);
    DistributedDataParallel ddp(
        model,
        {.bucket_cap_mb = 1e-6, .process_group = borrow(pg), .comm_hook = logging_hook(events)});
    mse_loss(ddp.forward(ones({2, 10})), zeros({2, 5})).backward();
    auto [launch, last] = first_launch_last_grad(events);
    CAPTURE(events.size());
    CHECK(launch < last);  // net2's bucket went out while net1's gradients were still to come
    CHECK(std::count(events.begin(), events.end(), kLaunch) == 4);
  });
}

TEST_CASE(
    "find_unused_parameters: the graph walk after forward keeps overlap with an unused layer") {
  // Buckets of 80 bytes, reverse registration: {unused.b, unused.w, fc2.b, fc2.w}, {fc1.b, fc1.w}.
  // Were `unused` only found at the end of backward, bucket 0 would wait for it, and with it
  // every bucket: nothing would overlap.
  run_threads(2, [&](ProcessGroup& pg) {
    std::vector<int> events;
    auto model = std::make_shared<Branchy>();
    log_gradients(*model, events);
    DistributedDataParallel ddp(model, {.bucket_cap_mb = 80.0 / (1024 * 1024),
                                        .find_unused_parameters = true,
                                        .process_group = borrow(pg),
                                        .comm_hook = logging_hook(events)});
    REQUIRE(ddp.reducer().num_buckets() == 2);
    for (int step = 0; step < 2; ++step) {  // before and after the buckets are rebuilt
      CAPTURE(step);
      events.clear();
      ddp.zero_grad();
      Tensor out = ddp.forward(ones({3, 4}));
      CHECK(ddp.reducer().unused_parameters().size() == 2);  // known before backward runs
      out.sum().backward();
      auto [launch, last] = first_launch_last_grad(events);
      CHECK(launch < last);
      CHECK(abs(model->unused->weight.grad()).sum().item() == 0.0f);
    }
  });
}

TEST_CASE(
    "find_unused_parameters over steps: a parameter unused in a later step gets a zero gradient") {
  for (bool view : {false, true}) {
    CAPTURE(view);
    run_threads(2, [&](ProcessGroup& pg) {
      auto model = std::make_shared<Partly>();
      DistributedDataParallel ddp(model, {.find_unused_parameters = true,
                                          .gradient_as_bucket_view = view,
                                          .process_group = borrow(pg)});
      optim::SGD opt(ddp.parameters(), {.lr = 0.1});
      // Steps 1 and 2 use b (2 rebuilds the buckets), step 3 does not.
      for (int step = 1; step <= 3; ++step) {
        CAPTURE(step);
        model->use_b = step < 3;
        opt.zero_grad(/*set_to_none=*/!view);
        ddp.forward(full({2, 3}, pg.rank() + 1.0)).sum().backward();
        const float b_grad = abs(model->b->weight.grad()).sum().item();
        if (step < 3) CHECK(b_grad > 0.0f);
        else CHECK(b_grad == 0.0f);  // not step 2's gradient left in the bucket
        CHECK(abs(model->a->weight.grad()).sum().item() > 0.0f);
        opt.step();
      }
    });
  }
}

namespace {
// Registered `late` first, called last: reverse registration order is the wrong guess.
struct Swapped : nn::Module {
  std::shared_ptr<nn::Linear> late, early;
  Swapped() {
    late = register_module("late", std::make_shared<nn::Linear>(6, 2));
    early = register_module("early", std::make_shared<nn::Linear>(4, 6));
  }
  Tensor forward(const Tensor& x) override { return late->forward(relu(early->forward(x))); }
};

Tensor swapped_x(int step, int world) {
  Generator g(500 + step);
  return randn({2 * world, 4}, {}, &g);
}
}  // namespace

TEST_CASE("buckets are rebuilt after the first iteration in the order gradients became ready") {
  manual_seed(3);
  const StateDict init = Swapped().state_dict();
  constexpr int kSteps = 3, kWorld = 2;
  // One process on the whole batch: the answer.
  auto ref = std::make_shared<Swapped>();
  ref->load_state_dict(init);
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  for (int s = 0; s < kSteps; ++s) {
    ref_opt.zero_grad();
    Tensor y = ref->forward(swapped_x(s, kWorld));
    sum(mul(y, y)).backward();
    ref_opt.step();
  }
  run_threads(kWorld, [&](ProcessGroup& pg) {
    std::vector<int> events;
    auto model = std::make_shared<Swapped>();
    model->load_state_dict(init);
    log_gradients(*model, events);
    // One parameter per bucket; first layout (reverse registration): early.b, early.w, late.b, late.w.
    DistributedDataParallel ddp(
        model,
        {.bucket_cap_mb = 1e-6, .process_group = borrow(pg), .comm_hook = logging_hook(events)});
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    std::vector<int> ready_order;
    for (int s = 0; s < kSteps; ++s) {
      CAPTURE(s);
      events.clear();
      opt.zero_grad();
      // Each rank's loss is its rows' share of the global sum of squares, times the world
      // size (DDP averages): the sum over ranks' rows equals the reference's loss.
      Tensor x = swapped_x(s, kWorld).narrow(pg.rank() * 2, 2);
      Tensor y = ddp.forward(x);
      mul_scalar(sum(mul(y, y)), static_cast<float>(kWorld)).backward();
      // Gradients that had to be final before the first all-reduce could start.
      const long grads_before_launch =
          std::find(events.begin(), events.end(), kLaunch) - events.begin();
      if (s == 0) {
        CHECK_FALSE(ddp.reducer().buckets_rebuilt());
        for (int e : events)
          if (e != kLaunch) ready_order.push_back(e);
        CHECK(ready_order.front() < 2);   // late's gradients come first, but bucket 0 is early.b:
        CHECK(grads_before_launch == 3);  // it waited for late's two and its own
      } else {
        CHECK(ddp.reducer().buckets_rebuilt());
        CHECK(grads_before_launch == 1);  // rebuilt in ready order: out after the first gradient
      }
      opt.step();
    }
    std::vector<int> layout;
    for (const Bucket& b : ddp.reducer().buckets())
      for (const BucketSlot& slot : b.slots) layout.push_back(static_cast<int>(slot.param));
    CHECK(layout == ready_order);
    auto got = model->parameters(), want = ref->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      auto g = got[i].to_vector<float>(), w = want[i].to_vector<float>();
      for (size_t k = 0; k < g.size(); ++k) CHECK(g[k] == doctest::Approx(w[k]).epsilon(1e-5));
    }
  });
}

TEST_CASE("broadcast_buffers: a perturbed running_mean on rank 1 is overwritten from rank 0, or "
          "kept when off") {
  for (bool on : {true, false}) {
    CAPTURE(on);
    std::vector<std::vector<float>> means(2);
    run_threads(2, [&](ProcessGroup& pg) {
      auto model =
          std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
              std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3)});
      DistributedDataParallel ddp(model, {.broadcast_buffers = on, .process_group = borrow(pg)});
      auto bn = std::dynamic_pointer_cast<nn::BatchNorm>((*model)[1]);
      if (pg.rank() == 1) {
        NoGradGuard no_grad;
        bn->running_mean.fill_(5.0);
      }
      ddp.forward(ones({4, 4})).sum().backward();  // same batch on both ranks
      means[pg.rank()] = bn->running_mean.to_vector<float>();
    });
    // Equal batches give equal statistics: only what the forward started from differs.
    for (size_t c = 0; c < 3; ++c) {
      if (on) CHECK(means[1][c] == means[0][c]);
      else CHECK(means[1][c] == doctest::Approx(means[0][c] + 0.9f * 5.0f));  // (1 - momentum) * 5
    }
  }
}

namespace {
struct Wide : nn::Module {  // parameters dominate: 2 x (256 x 256 + 256) floats, 514 KiB
  std::shared_ptr<nn::Linear> fc1, fc2;
  Wide() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(256, 256));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(256, 256));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

struct StepMemory {
  int64_t peak = 0, held_after_backward = 0;
};
// Bytes on `dev` during the third step (the first two build the optimizer state and rebuild
// the buckets), with .grad as its own tensor or as a view of the bucket.
StepMemory step_memory(ProcessGroup& pg, Device dev, bool view) {
  auto model = std::make_shared<Wide>();
  model->to(dev);
  DistributedDataParallel ddp(
      model, {.device = dev, .gradient_as_bucket_view = view, .process_group = borrow(pg)});
  optim::SGD opt(ddp.parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = ones({2, 256}, {.device = dev});
  StepMemory mem;
  std::vector<Tensor> grads;
  for (int s = 0; s < 3; ++s) {
    if (s == 2) reset_peak_memory_stats(dev);
    opt.zero_grad(/*set_to_none=*/!view);  // PyTorch's advice with bucket views: zero in place
    ddp.forward(x).sum().backward();
    if (s == 2) mem.held_after_backward = memory_stats(dev).allocated_bytes;
    opt.step();
    if (s == 2) mem.peak = memory_stats(dev).peak_bytes;
    if (view) {  // the same tensors every step: views of the bucket, never reallocated
      for (size_t i = 0; i < model->parameters().size(); ++i) {
        Tensor g = model->parameters()[i].grad();
        if (s == 1) grads.push_back(g);  // after the rebuild (step 2's forward)
        if (s == 2) CHECK(g.raw_data() == grads[i].raw_data());
      }
    }
  }
  return mem;
}
}  // namespace

TEST_CASE("gradient_as_bucket_view keeps .grad a view of the bucket and saves one gradient copy") {
  StepMemory plain, viewed;
  const int64_t grad_bytes = 2 * (256 * 256 + 256) * 4;
  run_threads(1, [&](ProcessGroup& pg) {
    const Device dev("cpu:3");  // a logical device of its own, so nothing else counts
    plain = step_memory(pg, dev, false);
    viewed = step_memory(pg, dev, true);
  });
  MESSAGE("step peak: .grad separate " << plain.peak << " B, .grad a bucket view " << viewed.peak
                                       << " B; held after backward " << plain.held_after_backward
                                       << " vs " << viewed.held_after_backward
                                       << " B; one gradient copy " << grad_bytes << " B");
  // After backward the separate .grad tensors are exactly one gradient copy more.
  CHECK(plain.held_after_backward - viewed.held_after_backward == grad_bytes);
  // At the peak (the last gradient arriving) the view saves that copy less what backward
  // hands over before it is added into the bucket, as PyTorch's AccumulateGrad does too: the
  // largest gradient (fc1.weight, 256 KiB) and a few activation-sized ones ([2, 256] floats,
  // 2 KiB each; 16 KiB allowed).
  CHECK(plain.peak - viewed.peak >= grad_bytes - 256 * 256 * 4 - 16 * 1024);
  CHECK(plain.peak - viewed.peak <= grad_bytes);
}
