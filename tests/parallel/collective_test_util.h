// collective_test_util.h: what the collective suites share (threads, shm processes, mpirun,
// cuda_ipc): inputs whose reductions a test can compute exactly, the serial reference of
// all_reduce, the gather/scatter buffers, and a count of dplab's shared-memory segments (none may be left behind).
// Read next: test_collectives_threads.cpp.
#pragma once
#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/comm/process_group.h"

namespace dplab::parallel::testing {

// Small integers, so float sums are exact and a reference compares with ==.
template <typename T>
T value(int rank, int64_t i, int salt = 0) {
  return static_cast<T>((rank * 7 + i * 3 + salt) % 11 - 5);
}

// Rank `rank`'s input of n elements.
template <typename T>
Tensor make(int rank, int64_t n, int salt = 0) {
  Tensor t = Tensor::empty({n}, {.dtype = dtype_of<T>()});
  T* p = t.data<T>();
  for (int64_t i = 0; i < n; ++i) p[i] = value<T>(rank, i, salt);
  return t;
}

// What all_reduce(op) of make<T>(0..n_ranks-1, n) must give, computed serially.
template <typename T>
std::vector<T> reference(ReduceOp op, int n_ranks, int64_t n, int salt = 0) {
  std::vector<T> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    T acc = value<T>(0, i, salt);
    for (int r = 1; r < n_ranks; ++r) {
      T v = value<T>(r, i, salt);
      if (op == ReduceOp::Max) acc = std::max(acc, v);
      else if (op == ReduceOp::Min) acc = std::min(acc, v);
      else acc += v;
    }
    if (op == ReduceOp::Avg) acc = static_cast<T>(acc * (1.0f / n_ranks));
    ref[i] = acc;
  }
  return ref;
}

// Rank `rank`'s buffers for all_gather, gather, scatter and reduce_scatter over n ranks,
// size elements each: empty outputs, the root's pieces and this rank's contributions.
struct GatherScatterBuffers {
  std::vector<Tensor> outs, gouts;  // int64 outputs of all_gather and gather
  std::vector<Tensor> ins;          // scatter's pieces: ins[i] is rank i's (read at the root)
  std::vector<Tensor> rs_ins;  // float32: this rank's contribution to block i of reduce_scatter
  GatherScatterBuffers(int n, int rank, int64_t size) {
    for (int i = 0; i < n; ++i) {
      outs.push_back(Tensor::empty({size}, {.dtype = DType::Int64}));
      gouts.push_back(Tensor::empty({size}, {.dtype = DType::Int64}));
      ins.push_back(make<int64_t>(100 + i, size));
      rs_ins.push_back(make<float>(rank, size, i));
    }
  }
};

// dplab's POSIX shared-memory segments now in /dev/shm.
inline int dplab_segments_in_dev_shm() {
  int count = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "dplab-", 6) == 0) ++count;
    closedir(d);
  }
  return count;
}

}  // namespace dplab::parallel::testing
