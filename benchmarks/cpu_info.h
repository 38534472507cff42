// cpu_info.h: the CPU's model name and the vector extensions dplab's kernels may use, read
// from /proc/cpuinfo, for the CSV rows of the training-throughput benchmarks (a figure is
// only comparable with one from the same CPU). train_throughput_torch.py's cpu_info() is
// PyTorch's side of the same reading.
// Read next: train_throughput.cpp, train_throughput_gpt.cpp.
#pragma once
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace dplab::bench {

struct CpuInfo {
  std::string model = "unknown", vector_extensions = "unknown";
};

inline CpuInfo cpu_info() {
  CpuInfo info;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    key.erase(key.find_last_not_of(" \t") + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (key == "model name" && info.model == "unknown") info.model = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream words(value);
      for (std::string w; words >> w;) flags.insert(w);
    }
  }
  if (!flags.empty()) {
    std::string ext;
    for (const char* want : {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                             "avx512_bf16", "avx512_fp16", "amx_tile"})
      if (flags.count(want)) ext += (ext.empty() ? "" : "+") + std::string(want);
    info.vector_extensions = ext.empty() ? "none" : ext;
  }
  for (char& c : info.model)
    if (c == ',') c = ' ';  // one CSV field
  return info;
}

}  // namespace dplab::bench
