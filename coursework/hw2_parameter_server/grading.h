// grading.h: how hw2 is checked. N logical CPU devices (cpu:0 .. cpu:N-1) each hold a replica
// of the reference MLP; the student's ps_step trains the master on every global batch and
// must end with the parameters of one device trained on the whole batch, while copy_to's
// counters must show exactly the bytes a parameter server moves, device by device.
// The initial weights and the batches are drawn afresh each time the tests run (a seed of
// their own): the MLP's own initialisation, x ~ N(0, 1), labels uniform over the classes.
// In a grade, ps_step runs in a worker process of its own (remote.h) and these checks in the
// judge, which computes the one-device answer itself.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ps.h"
#include "one_process_reference.h"

namespace hw2::grading {

using namespace dplab;
using namespace course;

inline std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.emplace_back(DeviceKind::CPU, i);
  return d;
}

// The seed of this run of the tests, drawn once: no answer fixed in advance fits it.
inline std::uint64_t seed() {
  static const std::uint64_t s = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  return s;
}
// The initial weights (every replica's, the one device's) and the global batch of a step.
inline std::shared_ptr<models::MLP> drawn_model() {
  manual_seed(seed());
  return std::make_shared<models::MLP>(kIn, std::vector<int64_t>{kHidden}, kClasses);
}
inline Tensor drawn_x(int step, int64_t rows) {
  Generator g(seed() + 100 + step);
  return randn({rows, kIn}, {}, &g);
}
inline Tensor drawn_y(int step, int64_t rows) {
  Generator g(seed() + 200 + step);
  return randint(0, kClasses, {rows}, {.dtype = DType::Int64}, &g);
}

struct Run {
  std::vector<std::vector<float>> params;  // the master's, after training
  std::vector<float> losses;               // each step's
  Traffic last_step;                       // the bytes of the last step
  int64_t param_floats = 0;
};

// `steps` parameter-server steps over n devices, `rows` rows per global batch.
inline Run train(int n, int steps, int64_t rows) {
  const std::vector<Device> devices = cpus(n);
  std::vector<std::shared_ptr<nn::Module>> replicas;
  for (int i = 0; i < n; ++i) {
    replicas.push_back(drawn_model());
    replicas.back()->to(devices[i]);
  }
  optim::SGD opt(replicas[0]->parameters(), {.lr = 0.1, .momentum = 0.9});
  Run run;
  for (int s = 0; s < steps; ++s) {
    course::harness::place().step = s + 1;  // a crash report names the step
    course::harness::place().step_word = "training step";
    run.last_step = Traffic{};
    run.losses.push_back(ps_step(replicas, devices, drawn_x(s, rows), drawn_y(s, rows), opt, run.last_step));
  }
  run.params = params_of(*replicas[0]);
  for (const Tensor& p : replicas[0]->parameters()) run.param_floats += p.numel();
  return run;
}

// One device, `steps` SGD steps on the whole batch of each step: its parameters and losses.
inline Run one_device(int steps, int64_t rows) {
  auto model = drawn_model();
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  Run run;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(drawn_x(s, rows)), drawn_y(s, rows));
    loss.backward();
    opt.step();
    run.losses.push_back(loss.item());
  }
  run.params = params_of(*model);
  return run;
}

inline bool check_equal_to_one_device(int n, int steps, int64_t rows) {
  const Run run = train(n, steps, rows), want = one_device(steps, rows);
  std::string why = compare_params(0, n, run.params, want.params,
                                   "are the replicas given the master's weights every step, the "
                                   "outputs' gradients sent back, and the replicas' gradients summed?");
  const std::string rank_words = fmt::format("rank 0 of {}: ", n);  // devices here, not ranks
  if (why.rfind(rank_words, 0) == 0) why = "on the master (cpu:0), " + why.substr(rank_words.size());
  for (int s = 0; s < steps && why.empty(); ++s)  // the parameters are right: the loss it returned?
    if (!(std::abs(run.losses[s] - want.losses[s]) <= 1e-5f + 1e-4f * std::abs(want.losses[s])))
      why = fmt::format("ps_step returned a loss of {:.6f} in step {}, but one process on the whole batch gets "
                        "{:.6f} (the mean cross entropy over every row of the batch)", run.losses[s], s + 1,
                        want.losses[s]);
  CHECK_MESSAGE(why.empty(), fmt::format("{} devices, {} steps, batches of {}: {}", n, steps, rows, why));
  return why.empty();
}

}  // namespace hw2::grading
