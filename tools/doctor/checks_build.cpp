// checks_build.cpp: what this dplab is: its version and commit, the compiler, which optional
// parts were built (CUDA, MPI, NCCL), and which CPU kernels run here and why (the CPU's
// vector extensions, the build, and the DPLAB_* settings that override the choice;
// checks_settings.cpp has checked those).
// Read next: checks_machine.cpp.
#include <fmt/core.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "framework/backend/backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/ops/ops.h"
#include "parallel/engines/collective_engine.h"
#include "tools/doctor/doctor.h"
#include "tools/doctor/version.h"

namespace dplab::doctor {
namespace {

std::set<std::string> cpu_flags(std::string* model) {
  std::ifstream f("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(f, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (key == "model name" && model->empty()) *model = line.substr(colon + 2);
    if (key == "flags" && flags.empty()) {
      std::istringstream words(line.substr(colon + 1));
      for (std::string w; words >> w;) flags.insert(w);
    }
  }
  return flags;
}

}  // namespace

void build_checks(Report& r) {
  r.fact("dplab", fmt::format("{} ({})", kDplabVersion, kDplabCommit));
  r.fact("compiler", fmt::format("g++ {}", __VERSION__));
  r.fact("built with",
         fmt::format("cuda {}, mpi {}, nccl {}, gloo {}", cuda_compiled() ? "yes" : "no",
                     parallel::mpi_built() ? "yes" : "no", parallel::nccl_built() ? "yes" : "no",
                     parallel::gloo_built() ? "yes" : "no"));

  std::string model;
  const std::set<std::string> flags = cpu_flags(&model);
  std::string ext;
  for (const char* want :
       {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"})
    if (flags.count(want)) ext += (ext.empty() ? "" : "+") + std::string(want);
  r.fact("cpu", fmt::format("{} x {} ({})", model.empty() ? "unknown" : model,
                            std::thread::hardware_concurrency(), ext.empty() ? "no AVX" : ext));

  // The kernels (the line every program prints, cpu_dispatch.h), and why the instruction set:
  // the best the CPU and the build both have unless DPLAB_GEMM_ISA says otherwise.
  const bool avx512 = gemm_isa_available(GemmIsa::Avx512);
  const std::string why = avx512 ? "the CPU has AVX-512 and this build has its kernels"
                          : flags.count("avx512f")
                              ? "the CPU has AVX-512 but this build has no AVX-512 kernels"
                              : "the CPU has no AVX-512";
  r.fact("kernels", fmt::format("{}; {}", kernels_summary(), why));
}

}  // namespace dplab::doctor
