// checks_gpu.cpp: each GPU (name, compute capability, memory, compute mode, peers), the
// driver and runtime versions, whether this build's kernels run on it, NCCL's version, and
// whether CUDA's MPS daemon is up (several ranks on one GPU otherwise take turns on it).
// Whether two processes can map each other's GPU memory (CUDA IPC, the cuda_ipc transport's
// premise) is not a property anyone reports: self_tests.cpp tries it.
// Read next: self_tests.cpp.
#include <fmt/core.h>

#include <cstdlib>
#include <sstream>

#include "framework/backend/backend.h"
#include "framework/backend/cuda/gpu_info.h"
#include "framework/backend/cuda/gpu_probe.h"
#include "parallel/engines/collective_engine.h"
#include "tools/doctor/doctor.h"

namespace dplab::doctor {
namespace {

// The architectures this build compiled for (meson's gpu_archs, e.g. "8.0,9.0+PTX"): true
// when a GPU of compute capability major.minor can run them (same major, minor >= built,
// or PTX from an older one, which the driver compiles).
bool build_runs_on(int major, int minor, std::string* archs) {
  *archs = DPLAB_GPU_ARCHS;
  std::istringstream in(*archs);
  for (std::string a; std::getline(in, a, ',');) {
    int ma = 0, mi = 0;
    if (std::sscanf(a.c_str(), "%d.%d", &ma, &mi) != 2) continue;
    const bool ptx = a.find("PTX") != std::string::npos;
    if ((ma == major && mi <= minor) || (ptx && (ma < major || (ma == major && mi <= minor))))
      return true;
  }
  return false;
}

}  // namespace

void gpu_checks(Report& r) {
  if (!cuda_compiled()) {
    r.add({.section = "gpu",
           .name = "CUDA backend",
           .verdict = Verdict::Skip,
           .detail = "this dplab was built without CUDA",
           .fix = "to train on a GPU: install the CUDA toolkit (nvcc), then meson setup "
                  "--reconfigure build"});
    return;
  }
  const GpuProbe& probe = cuda_gpu_probe();
  const CudaVersions v = cuda_versions();
  r.fact("cuda", fmt::format("runtime {}, {}", cuda_version_string(v.runtime),
                             v.driver ? "the driver supports " + cuda_version_string(v.driver)
                                      : std::string("no NVIDIA driver")));
  if (!probe.error.empty()) {
    Check c{.section = "gpu",
            .name = "counting the GPUs",
            .verdict = Verdict::Fail,
            .detail = probe.error};
    c.fix =
        v.driver != 0 && v.driver < v.runtime
            ? fmt::format("the driver supports CUDA {} but dplab was built with {}: update the "
                          "NVIDIA driver, or build with an older toolkit",
                          cuda_version_string(v.driver), cuda_version_string(v.runtime))
            : "nvidia-smi shows the GPUs and their compute mode; a GPU in exclusive-process mode "
              "takes one process: nvidia-smi -c DEFAULT (as root)";
    r.add(c);
    return;
  }
  const std::vector<GpuInfo> gpus = gpu_infos();
  if (gpus.empty()) {
    r.add({.section = "gpu",
           .name = "GPUs",
           .verdict = Verdict::Skip,
           .detail = "no CUDA GPU visible (the CPU backend runs everything)"});
    return;
  }
  for (const GpuInfo& g : gpus) {
    std::string peers;
    for (int p : g.peers) peers += fmt::format("{}{}", peers.empty() ? "" : ",", p);
    r.fact(
        fmt::format("gpu {}", g.index),
        fmt::format(
            "{}, compute capability {}.{}, {} SMs, {:.1f} GiB ({:.1f} free), mode {}, peers [{}]",
            g.name, g.cc_major, g.cc_minor, g.multiprocessors, g.total_bytes / 1073741824.0,
            g.free_bytes / 1073741824.0, g.compute_mode, peers));
    std::string archs;
    Check c{.section = "gpu",
            .name = fmt::format("gpu {}: this build's kernels run on it", g.index)};
    if (build_runs_on(g.cc_major, g.cc_minor, &archs)) {
      c.detail = fmt::format("built for {}", archs);
    } else {
      c.verdict = Verdict::Fail;
      c.detail = fmt::format("built for {}, the GPU is {}.{}", archs, g.cc_major, g.cc_minor);
      c.fix = fmt::format("meson configure build -Dgpu_archs={}.{} && ninja -C build", g.cc_major,
                          g.cc_minor);
    }
    r.add(c);
    if (g.compute_mode != "default") {
      r.add({.section = "gpu",
             .name = fmt::format("gpu {}: compute mode", g.index),
             .verdict = Verdict::Warn,
             .detail = g.compute_mode,
             .fix = "several ranks on this GPU (cuda_ipc, virtual GPUs) need the default mode: "
                    "nvidia-smi -i N -c DEFAULT (as root)"});
    }
  }
  r.fact("nccl", parallel::nccl_built() ? parallel::nccl_version() : std::string("not built"));
  Check mps{.section = "gpu", .name = "MPS (several processes on one GPU at once)"};
  if (cuda_mps_running()) {
    mps.detail = "running: processes sharing a GPU run their kernels side by side";
  } else if (gpus.size() == 1) {
    mps.verdict = Verdict::Warn;
    mps.detail = "not running, and there is one GPU: ranks that share it take turns on it";
    mps.fix = "for cuda_ipc with several ranks on this GPU (virtual GPUs) start it: "
              "nvidia-cuda-mps-control -d (as the user who runs the ranks; docs/gpu.md)";
  } else {
    mps.detail = "not running (needed only when several ranks share one GPU)";
  }
  r.add(mps);
}

}  // namespace dplab::doctor
