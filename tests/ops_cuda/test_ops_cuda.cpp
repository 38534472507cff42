// test_ops_cuda.cpp: CUDA backend parity at the op level. Every op of framework/ops/ops.h,
// forward and backward, on cuda:0 against the CPU backend (|gpu - cpu| <= atol + rtol*|cpu|),
// ops given a cpu and a cuda tensor, the fused optimizers, and three training steps of the
// MLP and the LeNet CNN. The cases are the tables of cases_*.cpp; test_ops_parity_cpu.cpp
// runs the same tables on cpu:1 (and checks that they name every op of ops.h), so they are
// known to run even where this file is skipped.
// Without a GPU (or in a build without CUDA) every case is skipped by doctest::skip, and
// main() exits 77, which Meson reports as SKIP: never as a pass (tests/gpu_suite.h). Read next: parity.h.
//
// The ops covered are complete as of framework/ops/ops.h (66 functions), checked at run time
// by test_ops_parity_cpu.cpp ("the parity tables cover every op of ops.h"), which reads ops.h:
//   factories       zeros ones full arange from_vector zeros_like ones_like randn rand uniform
//                   randint randperm                                   (cases_special.cpp)
//   elementwise     add sub mul div pow maximum eq add_scalar mul_scalar neg exp log sqrt abs
//                   relu sigmoid tanh broadcast_shapes sum_to          (cases_elementwise.cpp)
//   reductions      sum mean var max argmax                            (cases_elementwise.cpp)
//   linalg, shapes  matmul linear reshape transpose permute expand cat stack narrow chunk split
//                   split_sizes index_select gather to_device clone    (cases_linalg_shape.cpp)
//   nn              softmax log_softmax nll_loss cross_entropy mse_loss conv2d max_pool2d
//                   avg_pool2d batch_norm (cases_nn.cpp), dropout (cases_special.cpp)
//   transformer     gelu layer_norm embedding causal_softmax, matmul on 4-d, broadcast and
//                   transposed operands, causal attention  (cases_transformer.cpp)
// plus the fused optimizer steps (SGD, Adam, AdamW), which are not ops.h functions.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "framework/backend/backend.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "tests/gpu_suite.h"
#include "tests/ops_cuda/parity.h"

using namespace dplab;
using namespace dplab::parity;

namespace {

bool has_gpu() { return cuda_device_count() > 0; }
const Device kCpu("cpu"), kGpu("cuda:0");

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_compiled()) std::printf("test_ops_cuda: dplab was built without CUDA\n");
  return dplab::gpu_testing::gpu_suite_main(argc, argv, "test_ops_cuda");
}

TEST_CASE("elementwise ops on cuda:0 match the CPU, forward and backward" *
          doctest::skip(!has_gpu())) {
  run_table(elementwise_cases(), kCpu, kGpu, false);
}

TEST_CASE("reductions on cuda:0 match the CPU, forward and backward" * doctest::skip(!has_gpu())) {
  run_table(reduce_cases(), kCpu, kGpu, false);
}

TEST_CASE("matmul, linear, shape and index ops on cuda:0 match the CPU" *
          doctest::skip(!has_gpu())) {
  run_table(linalg_shape_cases(), kCpu, kGpu, false);
}

TEST_CASE("softmax, losses, conv2d, pooling and batch_norm on cuda:0 match the CPU" *
          doctest::skip(!has_gpu())) {
  run_table(nn_cases(), kCpu, kGpu, false);
}

TEST_CASE("gelu, layer_norm, embedding, causal_softmax, 4-d matmul and attention on cuda:0 match "
          "the CPU" *
          doctest::skip(!has_gpu())) {
  run_table(transformer_cases(), kCpu, kGpu, false);
}

TEST_CASE("transformer ops on cuda:0 reject bad ids and shapes as the CPU does" *
          doctest::skip(!has_gpu())) {
  check_transformer_errors(kGpu);
}

TEST_CASE("factories on cuda:0 give the CPU's values" * doctest::skip(!has_gpu())) {
  check_factories(kGpu);
}

TEST_CASE("dropout on cuda:0: the CPU's mask for a seed, reproducible, 1-p kept" *
          doctest::skip(!has_gpu())) {
  check_dropout(kGpu);
}

TEST_CASE("ops given a cpu and a cuda:0 tensor throw, naming both devices" *
          doctest::skip(!has_gpu())) {
  check_mixed_devices(kGpu);
}

TEST_CASE("SGD, Adam and AdamW steps on cuda:0 match the CPU, state included" *
          doctest::skip(!has_gpu())) {
  check_optimizers(kGpu, false);
}

TEST_CASE("MLP: three SGD momentum steps on cuda:0 match the CPU" * doctest::skip(!has_gpu())) {
  check_training_steps("mlp", kGpu, 3, false);
}

TEST_CASE("LeNet CNN: three SGD momentum steps on cuda:0 match the CPU" *
          doctest::skip(!has_gpu())) {
  check_training_steps("cnn", kGpu, 3, false);
}

// cuda:1 as a second logical device (on the same GPU when there is only one): kernels must
// run on the device that owns their output, and copies between logical devices must wait
// for their producer (cuda_backend.cpp's event fence). Runs last: it turns virtual GPUs on.
TEST_CASE("ops on cuda:1 (a second logical GPU) and copies between GPUs match the CPU" *
          doctest::skip(!has_gpu())) {
  if (cuda_logical_device_count() < 2) set_virtual_gpus(2);
  const Device gpu1("cuda:1");
  run_table(linalg_shape_cases(), kCpu, gpu1, false);
  run_table(nn_cases(), kCpu, gpu1, false);
  // x -> work -> the second device of its kind -> work -> back, differentiable all the way:
  // cuda:0 -> cuda:1 -> cuda:0 on the GPU, cpu:0 -> cpu:1 -> cpu:0 for the reference.
  run_table({{"to_device between two logical devices",
              {"to_device"},
              {x({129, 33})},
              [](const V& v) {
    const Device home = v[0].device();
    const Device second = home.is_cuda() ? Device("cuda:1") : Device("cpu:1");
    Tensor b = mul_scalar(to_device(exp(v[0]), second), 3.0f);
    return V{to_device(b, home)};
              }}},
            kCpu, kGpu, false);
}

// copy_ between overlapping views of one tensor: memmove's answer on the CPU (the backend's
// contract), and now on the GPU too, where a plain cudaMemcpyAsync leaves it undefined.
TEST_CASE("copy_ between overlapping views of one tensor on cuda:0 acts as memmove, like the CPU" *
          doctest::skip(!has_gpu())) {
  const int64_t n = 1 << 20;
  for (int64_t shift : {1, 7, 4096}) {
    CAPTURE(shift);
    std::vector<std::vector<float>> results;
    for (Device d : {kCpu, kGpu}) {
      Tensor t = arange(n, {.device = d});
      t.narrow(shift, n - shift).copy_(t.narrow(0, n - shift));          // forwards
      t.narrow(0, n - 2 * shift).copy_(t.narrow(shift, n - 2 * shift));  // and back
      results.push_back(t.to_vector<float>());
    }
    std::vector<float> ref(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) ref[static_cast<std::size_t>(i)] = static_cast<float>(i);
    const std::size_t s = static_cast<std::size_t>(shift), len = ref.size();
    std::memmove(ref.data() + s, ref.data(), (len - s) * sizeof(float));
    std::memmove(ref.data(), ref.data() + s, (len - 2 * s) * sizeof(float));
    CHECK(results[0] == ref);  // the CPU is memmove (a smeared copy would repeat 0..shift-1)
    CHECK(results[1] == ref);
  }
}
