// cuda_ipc_child.cpp: one rank of test_collectives_cuda_ipc.cpp. The test execs it N times
// (the CUDA runtime does not survive fork once initialised), each with a FileStore path;
// rank r works on logical device cuda:r (DPLAB_VIRTUAL_GPUS lets N ranks share one GPU).
// Usage: cuda_ipc_child MODE RANK N STORE_PATH
//   collectives  every collective on CUDA tensors against a serial CPU reference, odd and
//                zero sizes, ring and star; counters equal those of the same calls on CPU
//                tensors (the shm transport)
//   cpu          the same checks with CPU tensors only (shm): checks the checks, GPU or not
//   throw        rank 2 throws between two all_reduces; the others must fail naming it
//   kill         rank N-1 SIGKILLs itself after one all_reduce; the others must fail
// Prints "ok" or the error message on stdout; exit 0 or 1.
// Read next: test_collectives_cuda_ipc.cpp.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/tensor/tensor.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/file_store.h"
#include "tests/parallel/rank_harness.h"  // start_together, kHarnessTimeout

using namespace dplab;
using namespace dplab::parallel;

namespace {

float value(int rank, int64_t i) { return static_cast<float>((rank * 5 + i * 7) % 13 - 6); }

std::vector<float> values(int rank, int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

Tensor make(int rank, int64_t n, Device d) {
  Tensor t = Tensor::empty({n});
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = value(rank, i);
  return d.is_cpu() ? t : t.to(d);
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

void expect_equal(const Tensor& got, const std::vector<float>& ref, const std::string& what) {
  std::vector<float> g = got.to_vector<float>();  // copies a CUDA tensor to the host
  expect(g.size() == ref.size(),
         fmt::format("{}: {} elements, expected {}", what, g.size(), ref.size()));
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i] != ref[i])
      throw std::runtime_error(
          fmt::format("check failed: {}: element {} is {}, expected {}", what, i, g[i], ref[i]));
}

// Runs every collective on tensors of device d; returns the bytes sent per collective.
std::vector<int64_t> run_all(ProcessGroup& pg, Device d) {
  const int n = pg.size(), r = pg.rank();
  std::vector<int64_t> sent;
  auto record = [&] {
    sent.push_back(pg.comm_stats().total.bytes_sent);
    pg.reset_comm_stats();
  };
  pg.reset_comm_stats();
  // 6 * 2^20 + 3 floats: at N = 4 a chunk is 2 GPU segments (1 Mi floats each), the last
  // partly filled, and the chunks differ by one element
  for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100003}, int64_t{6291459}}) {
    for (Algorithm a : {Algorithm::Ring, Algorithm::Star}) {
      Tensor t = make(r, size, d);
      pg.all_reduce(t, ReduceOp::Sum, a);
      std::vector<float> ref(static_cast<std::size_t>(size), 0.0f);
      for (int q = 0; q < n; ++q)
        for (int64_t i = 0; i < size; ++i) ref[i] += value(q, i);
      expect_equal(t, ref, fmt::format("all_reduce({}) of {} on {}", algorithm_name(a), size, d));
      record();
    }
  }
  const int64_t size = 40001;
  Tensor m = make(r, size, d);
  pg.all_reduce(m, ReduceOp::Max);
  std::vector<float> ref_max = values(0, size);
  for (int q = 1; q < n; ++q)
    for (int64_t i = 0; i < size; ++i) ref_max[i] = std::max(ref_max[i], value(q, i));
  expect_equal(m, ref_max, "all_reduce(max)");
  record();

  Tensor b = make(r, size, d);
  pg.broadcast(b, n - 1);
  expect_equal(b, values(n - 1, size), "broadcast");
  record();

  std::vector<Tensor> outs, ins;
  for (int i = 0; i < n; ++i) {
    outs.push_back(Tensor::empty({size}, {.device = d}));
    ins.push_back(make(r + i, size, d));
  }
  pg.all_gather(outs, make(r, size, d));
  for (int i = 0; i < n; ++i) expect_equal(outs[i], values(i, size), "all_gather");
  record();

  Tensor block = Tensor::empty({size}, {.device = d});
  pg.reduce_scatter(block, ins, ReduceOp::Sum);
  std::vector<float> ref(static_cast<std::size_t>(size), 0.0f);
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < size; ++i) ref[i] += value(q + r, i);  // rank q's ins[r]
  expect_equal(block, ref, "reduce_scatter");
  expect_equal(ins[0], values(r, size), "reduce_scatter left its inputs alone");
  record();

  Tensor red = make(r, size, d);
  pg.reduce(red, 0, ReduceOp::Sum);
  if (r == 0) {
    std::vector<float> sum(static_cast<std::size_t>(size), 0.0f);
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < size; ++i) sum[i] += value(q, i);
    expect_equal(red, sum, "reduce");
  }
  record();

  std::vector<Tensor> gathered;
  for (int i = 0; i < n; ++i) gathered.push_back(Tensor::empty({size}, {.device = d}));
  pg.gather(gathered, make(r, size, d), 0);
  if (r == 0)
    for (int i = 0; i < n; ++i) expect_equal(gathered[i], values(i, size), "gather");
  record();

  Tensor piece = Tensor::empty({size}, {.device = d});
  pg.scatter(piece, ins, 0);  // root's ins[r] = make(0 + r)
  expect_equal(piece, values(r, size), "scatter");
  record();

  pg.barrier();
  if (n > 1) {
    Tensor got = Tensor::empty({size}, {.device = d});
    if (r == 0) pg.send(make(0, size, d), 1);
    if (r == 1) {
      pg.recv(got, 0);
      expect_equal(got, values(0, size), "recv");
    }
  }
  record();
  return sent;
}

int run(const std::string& mode, int rank, int n, const std::string& path) {
  // Start-up is not what the short timeout of the failure modes is about: every rank first
  // makes its CUDA context (lazy, and seconds on a busy machine), then checks in on a store
  // with the harness's long timeout; only the collectives after that get 3 s.
  const bool on_gpu = mode != "cpu";
  if (on_gpu) make(rank, 1, Device(DeviceKind::CUDA, rank));
  auto store = std::make_shared<FileStore>(path, n, testing::kHarnessTimeout);
  testing::start_together(*store, rank, n);
  ProcessGroupOptions opts{.timeout = Seconds(mode == "collectives" ? 60.0 : 3.0)};
  auto pg = create_process_group(store, rank, n, opts);
  if (!on_gpu) {
    run_all(*pg, Device(DeviceKind::CPU));
    return 0;
  }
  const Device gpu(DeviceKind::CUDA, rank);
  if (mode == "collectives") {
    std::vector<int64_t> on_gpu = run_all(*pg, gpu);
    expect(pg->transport_name(gpu) == "cuda_ipc",
           "CUDA tensors went by " + pg->transport_name(gpu));
    std::vector<int64_t> on_cpu = run_all(*pg, Device(DeviceKind::CPU));
    expect(on_gpu == on_cpu, "bytes sent per collective differ between cuda_ipc and shm");
    return 0;
  }
  Tensor t = make(rank, 3 << 20, gpu);
  if (mode == "throw") {
    pg->all_reduce(t);  // the cuda_ipc transport exists from here on
    if (rank == 2) throw std::runtime_error("rank 2 failed on purpose");
    pg->all_reduce(t);
    return 0;
  }
  if (mode == "kill") {
    pg->all_reduce(t);  // one that works, so the kill lands mid-run
    if (rank == n - 1) raise(SIGKILL);
    pg->all_reduce(t);
    return 0;
  }
  throw std::runtime_error("unknown mode " + mode);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s collectives|cpu|throw|kill RANK N STORE_PATH\n", argv[0]);
    return 2;
  }
  try {
    int code = run(argv[1], std::atoi(argv[2]), std::atoi(argv[3]), argv[4]);
    std::printf("ok");
    return code;
  } catch (const std::exception& e) {
    std::printf("%s", e.what());
    return 1;
  }
}
