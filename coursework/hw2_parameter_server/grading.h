// grading.h: how hw2 is checked. N logical CPU devices (cpu:0 .. cpu:N-1) each hold a replica
// of the reference MLP; the student's ps_step trains the master on every global batch and
// must end with the parameters of one device trained on the whole batch, while copy_to's
// counters must show exactly the bytes a parameter server moves, device by device.
#pragma once
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

struct Run {
  std::vector<std::vector<float>> params;  // the master's, after training
  Traffic last_step;                       // the bytes of the last step
  int64_t param_floats = 0;
};

// `steps` parameter-server steps over n devices, `rows` rows per global batch.
inline Run train(int n, int steps, int64_t rows) {
  const std::vector<Device> devices = cpus(n);
  std::vector<std::shared_ptr<nn::Module>> replicas;
  for (int i = 0; i < n; ++i) {
    replicas.push_back(make_model());
    replicas.back()->to(devices[i]);
  }
  optim::SGD opt(replicas[0]->parameters(), {.lr = 0.1, .momentum = 0.9});
  Run run;
  for (int s = 0; s < steps; ++s) {
    course::harness::place().step = s + 1;  // a crash report names the step
    course::harness::place().step_word = "training step";
    run.last_step = Traffic{};
    ps_step(replicas, devices, global_x(s, rows), global_y(s, rows), opt, run.last_step);
  }
  run.params = params_of(*replicas[0]);
  for (const Tensor& p : replicas[0]->parameters()) run.param_floats += p.numel();
  return run;
}

inline bool check_equal_to_one_device(int n, int steps, int64_t rows) {
  const Run run = train(n, steps, rows);
  std::string why = compare_params(0, n, run.params, single_process(steps, rows),
                                   "are the replicas given the master's weights every step, the "
                                   "outputs' gradients sent back, and the replicas' gradients summed?");
  const std::string rank_words = fmt::format("rank 0 of {}: ", n);  // devices here, not ranks
  if (why.rfind(rank_words, 0) == 0) why = "on the master (cpu:0), " + why.substr(rank_words.size());
  CHECK_MESSAGE(why.empty(), fmt::format("{} devices, {} steps, batches of {}: {}", n, steps, rows, why));
  return why.empty();
}

}  // namespace hw2::grading
