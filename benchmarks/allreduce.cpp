// allreduce.cpp (bench_allreduce): ring vs star (parameter server) all-reduce over the shm
// transport, N forked processes of one thread each, float32 sizes 4 KiB .. 64 MiB, and,
// when OpenMPI is there, dplab's mpi backend (MPI_Allreduce) on the same sizes
// (allreduce_mpi.cpp via mpirun; --mpi-btl tcp sends its bytes through sockets).
// Per size: time per call (slowest rank), algbw = S / t, busbw = 2(N-1)/N * S / t (the
// nccl-tests definition: the bytes a ring must move per rank; equal to link speed when the
// algorithm is bandwidth-optimal). The star's busbw falls as N grows: rank 0 is the wall.
// Usage: bench_allreduce [--backend ring,star,mpi] [--ranks 2,4] [--max-bytes 67108864]
//                        [--mpi-btl vader|tcp] [--link-gbps G] [--csv out.csv] [--no-mpi]
//        bench_allreduce --device cuda [--ranks 2,4] [--max-bytes N]: the cuda_ipc ring on
//        one GPU next to D2D copy bandwidth (runs bench_allreduce_gpu, built with CUDA).
// Read next: ../parallel/comm/ring.cpp, ../tutorials/05_collectives.md.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/rendezvous/file_store.h"
#include "parallel/comm/process_group.h"

using namespace dplab;
using namespace dplab::parallel;

namespace {

struct Row {
  int n;
  std::string algo;  // ring, star, mpi
  int64_t bytes;
  double seconds;
};

int iterations_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 3, 200));
}

// Forks n ranks; each times every (size, algorithm); rank 0 writes "algo bytes secs" lines
// into a pipe for the parent. Times are the slowest rank's (an all-reduce of the times).
std::vector<Row> run_ours(int n, const std::vector<int64_t>& sizes, const std::vector<Algorithm>& algos,
                          double link_gbps) {
  std::string store_path = fmt::format("/tmp/dplab-bench-{}-{}", getpid(), n);
  std::filesystem::remove(store_path);
  int fds[2];
  if (pipe(fds) != 0) DPLAB_FAIL("bench: pipe failed");
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid < 0) DPLAB_FAIL("bench: fork failed");
    if (pid == 0) {
      close(fds[0]);
      int code = 0;
      try {
        auto store = std::make_shared<FileStore>(store_path, n, Seconds(60.0));
        auto pg = create_process_group(store, r, n, {.timeout = Seconds(60.0), .link_gbps = link_gbps});
        std::string out;
        for (int64_t bytes : sizes)
          for (Algorithm a : algos) {
            Tensor t = Tensor::empty({bytes / 4});
            t.fill_(1.0);
            pg->all_reduce(t, ReduceOp::Sum, a);  // warm-up: page faults, caches
            const int iters = iterations_for(bytes);
            pg->barrier();
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < iters; ++i) pg->all_reduce(t, ReduceOp::Sum, a);
            double secs =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                iters;
            Tensor slowest = Tensor::empty({1});
            slowest.fill_(secs);
            pg->all_reduce(slowest, ReduceOp::Max, Algorithm::Star);
            out += fmt::format("{} {} {:.9f}\n", algorithm_name(a), bytes, slowest.item());
          }
        if (r == 0 && ::write(fds[1], out.data(), out.size()) < 0) code = 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench rank %d: %s\n", r, e.what());
        code = 1;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, got);
  close(fds[0]);
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::filesystem::remove(store_path);
  DPLAB_CHECK(ok, "bench: a rank of the N = {} run failed (see stderr)", n);
  std::vector<Row> rows;
  char algo[16];
  long long bytes;
  double secs;
  int used = 0;
  for (const char* p = text.c_str(); std::sscanf(p, "%15s %lld %lf%n", algo, &bytes, &secs, &used) == 3;
       p += used)
    rows.push_back({n, algo, bytes, secs});
  return rows;
}

bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string p = path;
  for (std::size_t start = 0; start <= p.size();) {
    std::size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    if (access((p.substr(start, end - start) + "/" + prog).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::vector<Row> run_mpi(int n, const std::vector<int64_t>& sizes, const std::string& btl) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  std::string prog = self + "/allreduce_mpi";
  if (!on_path("mpirun") || access(prog.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "bench_allreduce: no mpirun or no %s (built without MPI): no mpi rows\n",
                 prog.c_str());
    return {};
  }
  std::string cmd = fmt::format("mpirun --allow-run-as-root --oversubscribe --bind-to none -np {} "
                                "--mca btl self,{} {}", n, btl, prog);
  for (int64_t b : sizes) cmd += fmt::format(" {}", b);
  std::vector<Row> rows;
  if (FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r")) {
    long long bytes;
    double secs;
    while (std::fscanf(f, "%lld %lf", &bytes, &secs) == 2) rows.push_back({n, "mpi", bytes, secs});
    pclose(f);
  }
  return rows;
}

// --device cuda: hand over to bench_allreduce_gpu beside this program (built with CUDA).
int run_gpu_bench(const std::string& ranks, const std::string& max_bytes) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  std::string prog = self + "/bench_allreduce_gpu";
  if (access(prog.c_str(), X_OK) != 0) {
    std::printf("bench_allreduce --device cuda: this dplab was built without CUDA (no %s): "
                "skipped\n", prog.c_str());
    return 0;
  }
  std::vector<std::string> args = {prog};
  if (!ranks.empty()) args.insert(args.end(), {"--ranks", ranks});
  if (!max_bytes.empty()) args.insert(args.end(), {"--max-bytes", max_bytes});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execv(prog.c_str(), argv.data());
  std::fprintf(stderr, "bench_allreduce: cannot run %s: %s\n", prog.c_str(), std::strerror(errno));
  return 1;
}

std::string human(int64_t bytes) {
  if (bytes >= (1 << 20)) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} KiB", bytes >> 10);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= list.size();) {
    std::size_t c = list.find(',', start);
    if (c == std::string::npos) c = list.size();
    if (c > start) out.push_back(list.substr(start, c - start));
    start = c + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4};
  std::vector<std::string> backends = {"ring", "star", "mpi"};
  int64_t max_bytes = int64_t{64} << 20;
  std::string csv, btl = "vader";
  double link_gbps = 0;  // > 0: ring and star behind emulated links (transport/link_model.h)
  std::string device = "cpu", ranks_arg, max_bytes_arg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else if (a == "--max-bytes" && i + 1 < argc) max_bytes = std::atoll((max_bytes_arg = argv[++i]).c_str());
    else if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a == "--no-mpi") std::erase(backends, "mpi");
    else if (a == "--mpi-btl" && i + 1 < argc) btl = argv[++i];
    else if (a == "--link-gbps" && i + 1 < argc) link_gbps = std::atof(argv[++i]);
    else if (a == "--backend" && i + 1 < argc) backends = split(argv[++i]);
    else if (a == "--ranks" && i + 1 < argc) {
      ranks.clear();
      for (const std::string& n : split(ranks_arg = argv[++i])) ranks.push_back(std::atoi(n.c_str()));
    } else {
      std::fprintf(stderr, "usage: %s [--backend ring,star,mpi] [--ranks 2,4] [--max-bytes N] "
                   "[--mpi-btl vader|tcp] [--link-gbps G] [--csv FILE] [--no-mpi] [--device cpu|cuda]\n", argv[0]);
      return 2;
    }
  }
  if (device == "cuda") return run_gpu_bench(ranks_arg, max_bytes_arg);
  if (device != "cpu") {
    std::fprintf(stderr, "bench_allreduce: --device must be cpu or cuda, got %s\n", device.c_str());
    return 2;
  }
  std::vector<Algorithm> ours;
  for (const std::string& b : backends) {
    if (b == "ring") ours.push_back(Algorithm::Ring);
    else if (b == "star") ours.push_back(Algorithm::Star);
    else if (b != "mpi") {
      std::fprintf(stderr, "bench_allreduce: --backend takes ring, star and mpi, got '%s'\n", b.c_str());
      return 2;
    }
  }
  const bool mpi = std::find(backends.begin(), backends.end(), "mpi") != backends.end();
  if (btl != "vader" && btl != "tcp") {
    std::fprintf(stderr, "bench_allreduce: --mpi-btl takes vader or tcp, got '%s'\n", btl.c_str());
    return 2;
  }
  if (link_gbps < 0) {
    std::fprintf(stderr, "bench_allreduce: --link-gbps must be >= 0 (0: none), got %g\n", link_gbps);
    return 2;
  }
  std::vector<int64_t> sizes;
  for (int64_t b = 4096; b <= max_bytes; b *= 4) sizes.push_back(b);

  std::vector<Row> rows;
  try {
    for (int n : ranks) {
      if (!ours.empty()) {
        auto mine = run_ours(n, sizes, ours, link_gbps);
        rows.insert(rows.end(), mine.begin(), mine.end());
      }
      if (mpi) {
        auto theirs = run_mpi(n, sizes, btl);
        rows.insert(rows.end(), theirs.begin(), theirs.end());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 1;
  }

  std::map<std::tuple<int, std::string, int64_t>, double> secs;
  for (const Row& r : rows) secs[{r.n, r.algo, r.bytes}] = r.seconds;
  auto busbw = [](int n, int64_t bytes, double s) { return 2.0 * (n - 1) / n * bytes / s / 1e9; };
  std::printf("all-reduce of float32, 1 thread per rank: ring and star over dplab's shm, mpi = "
              "dplab's mpi backend over OpenMPI's %s (GB/s = 1e9 bytes/s)\n", btl.c_str());
  if (link_gbps > 0)
    std::printf("ring and star: every rank behind an emulated full-duplex %g Gbit/s link (%.2f GB/s): "
                "a bandwidth-optimal ring's busbw approaches it, the star's time is N x the ring's\n",
                link_gbps, link_gbps / 8);
  std::printf("%2s %8s", "N", "size");
  for (const std::string& b : backends) std::printf(" | %5s us %9s", b.c_str(), "busbw");
  const bool ratio = mpi && !ours.empty() && ours.front() == Algorithm::Ring;
  if (ratio) std::printf(" | %9s", "mpi/ring");
  const bool both = std::find(ours.begin(), ours.end(), Algorithm::Ring) != ours.end() &&
                    std::find(ours.begin(), ours.end(), Algorithm::Star) != ours.end();
  if (both) std::printf(" | %9s", "star/ring");
  std::printf("\n");
  for (int n : ranks)
    for (int64_t b : sizes) {
      std::printf("%2d %8s", n, human(b).c_str());
      for (const std::string& name : backends) {
        auto it = secs.find({n, name, b});
        if (it == secs.end() || it->second <= 0) std::printf(" | %8s %9s", "-", "-");
        else std::printf(" | %8.1f %9.2f", it->second * 1e6, busbw(n, b, it->second));
      }
      if (ratio) {
        auto m = secs.find({n, "mpi", b}), r = secs.find({n, "ring", b});
        if (m != secs.end() && r != secs.end() && m->second > 0)
          std::printf(" | %9.2f", r->second / m->second);  // busbw(mpi) / busbw(ring)
        else
          std::printf(" | %9s", "-");
      }
      if (both) {  // time of the star over time of the ring: the textbook says N (links) or 1
        auto s = secs.find({n, "star", b}), r = secs.find({n, "ring", b});
        if (s != secs.end() && r != secs.end() && r->second > 0) std::printf(" | %9.2f", s->second / r->second);
        else std::printf(" | %9s", "-");
      }
      std::printf("\n");
    }
  std::printf("busbw = 2(N-1)/N * bytes / time (the slowest rank's); mpi/ring = busbw ratio "
              "(> 1: MPI faster)\n");
  if (!csv.empty()) {
    FILE* f = std::fopen(csv.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "bench_allreduce: cannot write %s\n", csv.c_str());
      return 1;
    }
    std::fprintf(f, "ranks,algorithm,bytes,seconds,algbw_gbs,busbw_gbs,link_gbps\n");
    for (const Row& r : rows)
      std::fprintf(f, "%d,%s,%lld,%.9f,%.4f,%.4f,%g\n", r.n, r.algo.c_str(),
                   static_cast<long long>(r.bytes), r.seconds, r.bytes / r.seconds / 1e9,
                   busbw(r.n, r.bytes, r.seconds), r.algo == "mpi" ? 0.0 : link_gbps);
    std::fclose(f);
  }
  return 0;
}
