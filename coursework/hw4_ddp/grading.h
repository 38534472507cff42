// grading.h: how hw4 is checked. A small MLP trains on a global batch split across the
// ranks; with gradients averaged by the student's reducer, every rank must end with the
// parameters of one process trained on the whole batch. In a student's own build the ranks
// are threads, each with a process group over the library's thread transport, whose
// counters say how many all-reduces ran, and a hook registered before the reducer's sees how
// many were launched by the time the last gradient of a backward arrived (overlap). In the
// grader the ranks are processes of their own, and both are read from the bytes each rank
// sent through the broker (remote.cpp).
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "reducer.h"
#include "one_process_reference.h"

namespace hw4::grading {

using namespace dplab;
using namespace course;
using dplab::parallel::ProcessGroup;

// "[[3], [2, 1], [0]]"
inline std::string buckets_str(const std::vector<std::vector<size_t>>& buckets) {
  std::string s = "[";
  for (size_t b = 0; b < buckets.size(); ++b) {
    s += b ? ", [" : "[";
    for (size_t i = 0; i < buckets[b].size(); ++i) s += (i ? ", " : "") + std::to_string(buckets[b][i]);
    s += "]";
  }
  return s + "]";
}

}  // namespace hw4::grading
