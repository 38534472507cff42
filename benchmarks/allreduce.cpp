// allreduce.cpp (bench_allreduce): dplab's all-reduce algorithms over the shm transport
// (ring, recursive doubling, halving-doubling, one-shot, auto, star), N forked processes of one
// thread each, float32 sizes 4 KiB .. 64 MiB, and, when OpenMPI is there, dplab's mpi
// backend (MPI_Allreduce) on the same sizes (allreduce_mpi.cpp via mpirun; --mpi-btl tcp
// sends its bytes through sockets). The auto rows say which algorithm auto ran.
// Per size: time per call (slowest rank, best of --trials runs of the loop, each trial running
// every algorithm once in turn; the same rule for MPI), algbw = S / t, busbw = 2(N-1)/N * S / t (the nccl-tests definition: the bytes
// a ring must move per rank; equal to link speed when the algorithm is bandwidth-optimal).
// The star's busbw falls as N grows: rank 0 is the wall. auto/mpi is busbw(auto) /
// busbw(mpi): >= 1 where dplab's choice is at least as fast as MPI_Allreduce.
// Last, the alpha-beta fit of the recursive-doubling rows at N = 2 (one step: t = alpha +
// S·(beta + gamma)), and the wake-up of the one-shot rows at 4 KiB where ranks outnumber
// cores (a wait on each peer, each for the scheduler), beside the numbers algorithms/cost.cpp's
// shm_link_cost() holds. --csv out.csv also draws out.png (plot_allreduce.py: bus bandwidth
// against size, a panel per N) when python3 has matplotlib; --no-plot skips it.
// --ranks-per-node L pretends the N ranks sit on N/L nodes of L that still share memory
// (ProcessGroupOptions::ranks_per_node, nodes_share_memory): hierarchical then runs in two
// levels, auto weighs it, and the table adds each algorithm's inter-node bytes per rank (the
// busiest rank's, measured); --link-gbps then slows only the hops between nodes.
// gloo (--engine ...,gloo): dplab's gloo engine (gloo's own ring all-reduce over TCP), run by
// dplab-run through allreduce_nodes.cpp. --nodes K pretends the N ranks sit on K nodes of this
// machine that talk over the network (K dplab-run launchers on 127.0.0.1, N/K ranks each):
// dplab's algorithms then run over the node transport (shm inside a node, gloo's TCP wire
// between nodes), as across machines; mpi with --mpi-btl tcp is the like-for-like comparison.
// Usage: bench_allreduce [--engine ring,recursive_doubling,halving_doubling,one_shot,
//                                  hierarchical,auto,star,mpi,gloo]
//                        [--ranks 2,3,4] [--ranks-per-node L | --nodes K] [--min-bytes 4096]
//                        [--max-bytes 67108864] [--trials 5]
//                        [--mpi-btl vader|tcp] [--link-gbps G] [--csv out.csv] [--no-plot] [--no-mpi]
//        bench_allreduce --device cuda [--ranks 2,4] [--max-bytes N]: the cuda_ipc ring on
//        one GPU next to D2D copy bandwidth (runs bench_allreduce_gpu, built with CUDA).
// Read next: ../parallel/algorithms/ring.cpp, ../tutorials/05_collectives.md.
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

#include "benchmarks/allreduce_table.h"
#include "benchmarks/plot_runner.h"
#include "framework/tensor/tensor.h"
#include "parallel/algorithms/cost.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/file_store.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/tcp_store.h"
#include "parallel/transport/mailbox_transport.h"  // cpu_cores

using namespace dplab;
using namespace dplab::parallel;
using namespace dplab::bench;

namespace {

struct Row {
  int n;
  std::string algo;  // ring, recursive_doubling, ..., hierarchical, auto, star, mpi
  int64_t bytes;
  double seconds;
  std::string ran;  // what ran: for auto, the algorithm it picked; else algo
  int64_t inter_node = 0;  // the most bytes one rank sent to other nodes in one call
};

int iterations_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 3, 200));
}

// Forks n ranks; each times every (size, algorithm); rank 0 writes "algo bytes secs" lines
// into a pipe for the parent. Times are the slowest rank's (an all-reduce of the times).
std::vector<Row> run_ours(int n, const std::vector<int64_t>& sizes,
                          const std::vector<Algorithm>& algos, double link_gbps, int trials,
                          int ranks_per_node) {
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
        auto pg = create_process_group(
            store, r, n,
            {.timeout = Seconds(60.0),
             .link_gbps = link_gbps,
             .ranks_per_node = ranks_per_node,
             .nodes_share_memory = true});
        std::string out;
        for (int64_t bytes : sizes) {
          Tensor t = Tensor::empty({bytes / 4});
          t.fill_(1.0);
          const int iters = iterations_for(bytes);
          // warm-up, one untimed loop each: page faults, caches, and the scheduler settling
          // the ranks on the cores (the first size's first calls can find two ranks on one core)
          for (Algorithm a : algos)
            for (int i = 0; i < iters; ++i) pg->all_reduce(t, ReduceOp::Sum, a);
          // Trial k times every algorithm once, so a slow stretch of the machine (this VM has
          // some, seconds long) costs each algorithm a trial, not one algorithm all of them:
          // one after another, auto's row once ran 7x slower than the ring's, the same algorithm.
          std::vector<double> best(algos.size(), 1e300);
          for (int trial = 0; trial < trials; ++trial)
            for (std::size_t k = 0; k < algos.size(); ++k) {
              pg->barrier();
              auto t0 = std::chrono::steady_clock::now();
              for (int i = 0; i < iters; ++i) pg->all_reduce(t, ReduceOp::Sum, algos[k]);
              Tensor slowest = Tensor::empty({1});
              slowest.fill_(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                  iters);
              pg->all_reduce(slowest, ReduceOp::Max, Algorithm::Star);
              best[k] = std::min(best[k], double(slowest.item()));
            }
          for (std::size_t k = 0; k < algos.size(); ++k) {
            std::string ran = pg->all_reduce_algorithm(bytes, algos[k]);
            if (ran.rfind("auto:", 0) == 0) ran = ran.substr(5);
            // one more call, counted: the bytes this rank sent across nodes; the busiest rank's
            pg->reset_comm_stats();
            pg->all_reduce(t, ReduceOp::Sum, algos[k]);
            Tensor inter = Tensor::empty({1}, {.dtype = DType::Int64});
            inter.data<int64_t>()[0] = pg->comm_stats().total.bytes_sent_inter_node;
            pg->all_reduce(inter, ReduceOp::Max, Algorithm::Star);
            out += fmt::format("{} {} {:.9f} {} {}\n", algorithm_name(algos[k]), bytes, best[k],
                               ran, inter.to_vector<int64_t>()[0]);
          }
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
  char algo[32], ran[32];
  long long bytes, inter;
  double secs;
  int used = 0;
  for (const char* p = text.c_str();
       std::sscanf(p, "%31s %lld %lf %31s %lld%n", algo, &bytes, &secs, ran, &inter, &used) == 5;
       p += used)
    rows.push_back({n, algo, bytes, secs, ran, inter});
  return rows;
}

// The gloo rows, and with nodes > 1 every dplab row: K dplab-run launchers on 127.0.0.1 (one
// per pretended node, N/K ranks each) running allreduce_nodes; node 0's rank 0 prints the rows.
std::vector<Row> run_nodes(int n, int nodes, const std::vector<int64_t>& sizes,
                           const std::vector<std::string>& engines, int trials) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  const std::string prog = self + "/allreduce_nodes";
  std::string run = std::getenv("DPLAB_RUN") ? std::getenv("DPLAB_RUN")
                                             : self + "/../parallel/launch/exe/dplab-run";
  DPLAB_CHECK(access(prog.c_str(), X_OK) == 0 && access(run.c_str(), X_OK) == 0,
              "bench: the gloo rows need {} and dplab-run ({}; or set DPLAB_RUN)", prog, run);
  DPLAB_CHECK(n % nodes == 0, "bench: --nodes {} must divide N = {}", nodes, n);
  std::string list;
  for (const std::string& e : engines) list += (list.empty() ? "" : ",") + e;
  std::string args = fmt::format("{} --engines {} --trials {}", prog, list, trials);
  for (int64_t b : sizes) args += fmt::format(" {}", b);
  const int port = find_free_port();
  // The job's token goes to the launchers through the environment, as dplab-run's own ranks
  // get theirs: on a command line (`export DPLAB_JOB_TOKEN=...` in the shell's) any user of
  // the machine could read it in `ps` and join the job's store.
  ::setenv(kJobTokenVariable, make_job_token().c_str(), 1);
  // node 0's launcher prints the rows; the others run in the background, quiet
  std::string cmd;
  for (int k = nodes - 1; k >= 0; --k)
    cmd += fmt::format("{} --nnodes {} --node-rank {} --nproc-per-node {} --master-addr 127.0.0.1 "
                       "--master-port {} {}{}",
                       run, nodes, k, n / nodes, port, args, k ? " >/dev/null & " : "; wait");
  std::vector<Row> rows;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char algo[32], ran[32];
    long long bytes;
    double secs;
    while (std::fscanf(f, "%31s %lld %lf %31s", algo, &bytes, &secs, ran) == 4)
      rows.push_back({n, algo, bytes, secs, ran});
    DPLAB_CHECK(pclose(f) == 0 && !rows.empty(), "bench: the dplab-run job for N = {} failed", n);
  }
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

std::vector<Row> run_mpi(int n, const std::vector<int64_t>& sizes, const std::string& btl,
                         int trials) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  std::string prog = self + "/allreduce_mpi";
  if (!on_path("mpirun") || access(prog.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "bench_allreduce: no mpirun or no %s (built without MPI): no mpi rows\n",
                 prog.c_str());
    return {};
  }
  std::string cmd = fmt::format("mpirun --allow-run-as-root --oversubscribe --bind-to none -np {} "
                                "--mca btl self,{} {} --trials {}",
                                n, btl, prog, trials);
  for (int64_t b : sizes) cmd += fmt::format(" {}", b);
  std::vector<Row> rows;
  if (FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r")) {
    long long bytes;
    double secs;
    while (std::fscanf(f, "%lld %lf", &bytes, &secs) == 2)
      rows.push_back({n, "mpi", bytes, secs, "mpi"});
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
                "skipped\n",
                prog.c_str());
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

// What the command line asks for (the defaults are the usage's).
struct Options {
  std::vector<int> ranks = {2, 3, 4};
  std::vector<std::string> engines = {
      "ring", "recursive_doubling", "halving_doubling", "one_shot", "auto", "star", "mpi"};
  int64_t max_bytes = int64_t{64} << 20, min_bytes = 4096;
  int trials = 5, nodes = 1;
  std::string csv, btl = "vader";
  bool plot = true;
  double link_gbps = 0;    // > 0: dplab's algorithms behind emulated links (transport/link_model.h)
  int ranks_per_node = 0;  // > 0: pretend nodes of this many ranks
  // --ranks and --max-bytes as given: --device cuda hands them on to bench_allreduce_gpu
  std::string device = "cpu", ranks_arg, max_bytes_arg;
};

constexpr int kUsageError = 2;

// Reads the command line into o; on an option it does not know, prints the usage and
// returns false.
bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc) o.csv = argv[++i];
    else if (a == "--max-bytes" && i + 1 < argc)
      o.max_bytes = std::atoll((o.max_bytes_arg = argv[++i]).c_str());
    else if (a == "--trials" && i + 1 < argc) o.trials = std::atoi(argv[++i]);
    else if (a == "--nodes" && i + 1 < argc) o.nodes = std::atoi(argv[++i]);
    else if (a == "--min-bytes" && i + 1 < argc) o.min_bytes = std::atoll(argv[++i]);
    else if (a == "--device" && i + 1 < argc) o.device = argv[++i];
    else if (a == "--no-mpi") std::erase(o.engines, "mpi");
    else if (a == "--no-plot") o.plot = false;
    else if (a == "--mpi-btl" && i + 1 < argc) o.btl = argv[++i];
    else if (a == "--link-gbps" && i + 1 < argc) o.link_gbps = std::atof(argv[++i]);
    else if (a == "--ranks-per-node" && i + 1 < argc) o.ranks_per_node = std::atoi(argv[++i]);
    else if ((a == "--engine" || a == "--backend") && i + 1 < argc)
      o.engines = split(argv[++i]);  // --backend: the old name
    else if (a == "--ranks" && i + 1 < argc) {
      o.ranks.clear();
      for (const std::string& n : split(o.ranks_arg = argv[++i]))
        o.ranks.push_back(std::atoi(n.c_str()));
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--engine ring,recursive_doubling,halving_doubling,one_shot,hierarchical,auto,"
          "star,mpi,gloo] [--ranks 2,3,4] [--ranks-per-node L | --nodes K] [--min-bytes N] "
          "[--max-bytes N] [--trials T] [--mpi-btl vader|tcp] [--link-gbps G] "
          "[--csv FILE] [--no-plot] [--no-mpi] [--device cpu|cuda]\n",
          argv[0]);
      return false;
    }
  }
  return true;
}

// dplab's algorithms among --engine (mpi and gloo are run apart); on an unknown name, says so
// and returns false.
bool our_algorithms(const std::vector<std::string>& engines, std::vector<Algorithm>& ours) {
  for (const std::string& b : engines) {
    if (b == "mpi" || b == "gloo") continue;
    try {
      ours.push_back(algorithm_from_name(b));
    } catch (const Error& e) {
      std::fprintf(stderr, "bench_allreduce: --engine takes those, mpi and gloo: %s\n", e.what());
      return false;
    }
  }
  return true;
}

// Says what is wrong with the options, the first thing found, and returns false.
bool options_hold(const Options& o) {
  auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "bench_allreduce: %s\n", why.c_str());
    return false;
  };
  if (o.nodes < 1) return refuse(fmt::format("--nodes must be >= 1, got {}", o.nodes));
  if (o.nodes > 1 && o.link_gbps > 0)
    return refuse("--nodes > 1 runs over gloo's wire: no --link-gbps");
  if (o.btl != "vader" && o.btl != "tcp")
    return refuse(fmt::format("--mpi-btl takes vader or tcp, got '{}'", o.btl));
  if (o.link_gbps < 0)
    return refuse(fmt::format("--link-gbps must be >= 0 (0: none), got {:g}", o.link_gbps));
  if (o.trials < 1) return refuse(fmt::format("--trials must be >= 1, got {}", o.trials));
  if (o.nodes > 1 && o.ranks_per_node > 0)
    return refuse("--nodes K (nodes that talk over TCP) and --ranks-per-node L (nodes that share "
                  "memory) are two ways to pretend nodes: give one, got both");
  for (int n : o.ranks)
    if (n < 1) {
      return refuse(fmt::format("--ranks takes counts >= 1, got {}", n));
    } else if (o.ranks_per_node < 0 || (o.ranks_per_node > 0 && n % o.ranks_per_node != 0)) {
      return refuse(fmt::format("--ranks-per-node must be 0 (one node) or divide every --ranks "
                                "count, got {} for {} ranks",
                                o.ranks_per_node, n));
    }
  if (o.min_bytes < 4 || o.min_bytes % 4 != 0)
    return refuse(fmt::format("--min-bytes must be a multiple of 4, got {}", o.min_bytes));
  return true;
}

bool has(const std::vector<std::string>& engines, const std::string& name) {
  return std::find(engines.begin(), engines.end(), name) != engines.end();
}

// Every row of every N: dplab's algorithms (over shm, or across pretended nodes), gloo's, MPI's.
std::vector<Row> run_every_n(const Options& o, const std::vector<Algorithm>& ours,
                             const std::vector<int64_t>& sizes) {
  std::vector<Row> rows;
  auto add = [&rows](const std::vector<Row>& more) {
    rows.insert(rows.end(), more.begin(), more.end());
  };
  for (int n : o.ranks) {
    if (o.nodes > 1) {  // every dplab row and gloo's across the pretended nodes
      std::vector<std::string> across;
      for (const std::string& e : o.engines)
        if (e != "mpi") across.push_back(e);
      add(run_nodes(n, o.nodes, sizes, across, o.trials));
    } else {
      if (!ours.empty()) add(run_ours(n, sizes, ours, o.link_gbps, o.trials, o.ranks_per_node));
      if (has(o.engines, "gloo")) add(run_nodes(n, 1, sizes, {"gloo"}, o.trials));
    }
    if (has(o.engines, "mpi")) add(run_mpi(n, sizes, o.btl, o.trials));
  }
  return rows;
}

// The rows by (N, algorithm, size); a row that measured no time is as good as none.
class RowIndex {
 public:
  explicit RowIndex(const std::vector<Row>& rows) {
    for (const Row& r : rows) at_[{r.n, r.algo, r.bytes}] = &r;
  }
  const Row* find(int n, const std::string& algo, int64_t bytes) const {
    auto it = at_.find({n, algo, bytes});
    return it == at_.end() || it->second->seconds <= 0 ? nullptr : it->second;
  }

 private:
  std::map<std::tuple<int, std::string, int64_t>, const Row*> at_;
};

// GB/s by the nccl-tests definition: the bytes a ring moves per rank, over the time.
double busbw(int n, int64_t bytes, double s) { return 2.0 * (n - 1) / n * bytes / s / 1e9; }

// What the table measured, over what, and how.
void print_preamble(const Options& o) {
  const std::string ours_over =
      o.nodes > 1
          ? fmt::format("shm in a node + gloo's TCP wire across {} pretended nodes", o.nodes)
          : "its shm transport";
  std::printf(
      "all-reduce of float32, 1 thread per rank, %d cores: dplab's algorithms over %s, "
      "mpi = dplab's mpi engine over OpenMPI's %s, gloo = dplab's gloo engine (gloo's ring, TCP); "
      "time = slowest rank, best of %d (GB/s = 1e9 bytes/s)\n",
      cpu_cores(), ours_over.c_str(), o.btl.c_str(), o.trials);
  if (o.ranks_per_node > 0)
    std::printf("pretend nodes of %d ranks (ranks_per_node): hierarchical runs in two levels; "
                "'inter' = the busiest rank's bytes to other nodes per call\n",
                o.ranks_per_node);
  if (o.link_gbps > 0)
    std::printf(
        "dplab's algorithms: every rank behind an emulated full-duplex %g Gbit/s link (%.2f GB/s): "
        "a bandwidth-optimal ring's busbw approaches it, the star's time is N x the ring's\n",
        o.link_gbps, o.link_gbps / 8);
}

// One line per (N, size): each engine's time and busbw, auto's pick, auto against MPI.
void print_table(const Options& o, bool has_auto, const std::vector<int64_t>& sizes,
                 const RowIndex& index) {
  const bool ratio = has(o.engines, "mpi") && has_auto;
  const bool inter_column = o.ranks_per_node > 0;  // an inter-node bytes column per algorithm
  std::printf("%2s %8s", "N", "size");
  for (const std::string& b : o.engines) {
    std::printf(" | %5s us %5s", short_name(b).c_str(), "busbw");
    if (inter_column && b != "mpi") std::printf(" %9s", "inter");
  }
  if (has_auto) std::printf(" | auto ran");
  if (ratio) std::printf(" | auto/mpi");
  std::printf("\n");
  for (int n : o.ranks)
    for (int64_t b : sizes) {
      std::printf("%2d %8s", n, human(b).c_str());
      for (const std::string& name : o.engines) {
        const Row* r = index.find(n, name, b);
        if (r) std::printf(" | %8.1f %5.2f", r->seconds * 1e6, busbw(n, b, r->seconds));
        else std::printf(" | %8s %5s", "-", "-");
        if (inter_column && name != "mpi")
          std::printf(" %9s", r ? human_exact(r->inter_node).c_str() : "-");
      }
      if (has_auto) {
        const Row* a = index.find(n, "auto", b);
        std::printf(" | %8s", a ? short_name(a->ran).c_str() : "-");
      }
      if (ratio) {  // busbw(auto) / busbw(mpi) = t(mpi) / t(auto)
        const Row *a = index.find(n, "auto", b), *m = index.find(n, "mpi", b);
        if (a && m) std::printf(" | %8.2f", m->seconds / a->seconds);
        else std::printf(" | %8s", "-");
      }
      std::printf("\n");
    }
  std::printf("rd = recursive_doubling, hd = halving_doubling, 1shot = one_shot, hier = "
              "hierarchical; busbw = 2(N-1)/N "
              "* bytes / time; "
              "auto/mpi = busbw ratio (>= 1: dplab's choice at least as fast as MPI_Allreduce)\n");
}

// The measured alpha and beta + gamma beside the ones auto weighs on this machine.
void print_alpha_beta_fit(const std::vector<Row>& rows, const LinkCost& model) {
  std::vector<std::pair<double, double>> rd2;
  for (const Row& r : rows)
    if (r.n == 2 && r.algo == "recursive_doubling") rd2.push_back({double(r.bytes), r.seconds});
  if (auto [alpha, beta] = fit_alpha_beta(rd2); beta > 0)
    std::printf(
        "alpha-beta fit of recursive doubling at N = 2 (one exchange of S, reduced: t = alpha + "
        "S*(beta+gamma)): alpha = %.2f us, 1/(beta+gamma) = %.2f GB/s; the model auto uses "
        "(algorithms/cost.cpp): alpha = %.2f us, 1/(beta+gamma) = %.2f GB/s\n",
        alpha * 1e6, 1e-9 / beta, model.alpha * 1e6, 1e-9 / (model.beta + model.gamma));
}

// wake: a one-shot of 4 KiB is one slot, a wait on each of N-1 peers; where ranks outnumber
// cores, what it takes beyond the model's time without wake-ups is the scheduler bringing
// ranks back, that many times (the model's count: its time with wake = 1 s, less without)
void print_wake_ups(const std::vector<int>& ranks, const RowIndex& index, const LinkCost& model) {
  LinkCost no_wake = model, unit_wake = model;
  no_wake.wake = 0;
  unit_wake.wake = 1;
  for (int n : ranks)
    if (const Row* r = index.find(n, "one_shot", 4096); r && n > cpu_cores()) {
      const double base = all_reduce_seconds(Algorithm::OneShot, n, 4096, no_wake);
      const double wakes = all_reduce_seconds(Algorithm::OneShot, n, 4096, unit_wake) - base;
      std::printf(
          "wake-up at N = %d (one-shot of 4 KiB, less its modelled time, over its %.0f waits): "
          "%.1f us; the model auto uses: %.1f us\n",
          n, wakes, (r->seconds - base) / wakes * 1e6, model.wake * 1e6);
    }
}

// --csv: every row, and its plot unless --no-plot. Exit status: 1 when either fails.
int write_csv(const Options& o, const std::vector<Row>& rows) {
  FILE* f = std::fopen(o.csv.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "bench_allreduce: cannot write %s\n", o.csv.c_str());
    return 1;
  }
  std::fprintf(f, "ranks,algorithm,ran,bytes,seconds,algbw_gbs,busbw_gbs,link_gbps,"
                  "ranks_per_node,inter_node_bytes\n");
  for (const Row& r : rows)
    std::fprintf(f, "%d,%s,%s,%lld,%.9f,%.4f,%.4f,%g,%d,%lld\n", r.n, r.algo.c_str(), r.ran.c_str(),
                 static_cast<long long>(r.bytes), r.seconds, r.bytes / r.seconds / 1e9,
                 busbw(r.n, r.bytes, r.seconds), r.algo == "mpi" ? 0.0 : o.link_gbps,
                 r.algo == "mpi" ? 0 : o.ranks_per_node, static_cast<long long>(r.inter_node));
  std::fclose(f);
  std::printf("wrote %s\n", o.csv.c_str());
  if (!o.plot) return 0;
  const std::string png = std::filesystem::path(o.csv).replace_extension(".png").string();
  const dplab::bench::PlotRun run =
      dplab::bench::run_plot_script(DPLAB_ALLREDUCE_PLOT_SCRIPT, {o.csv, png});
  if (run.ok) std::printf("%s: %s\n", run.note.c_str(), png.c_str());
  else std::printf("%s\n", run.note.c_str());
  return run.failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) return kUsageError;
  if (o.device == "cuda") return run_gpu_bench(o.ranks_arg, o.max_bytes_arg);
  if (o.device != "cpu") {
    std::fprintf(stderr, "bench_allreduce: --device must be cpu or cuda, got %s\n",
                 o.device.c_str());
    return kUsageError;
  }
  std::vector<Algorithm> ours;
  if (!our_algorithms(o.engines, ours) || !options_hold(o)) return kUsageError;
  std::vector<int64_t> sizes;
  for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= 4) sizes.push_back(b);

  std::vector<Row> rows;
  try {
    rows = run_every_n(o, ours, sizes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 1;
  }
  const RowIndex index(rows);
  const bool has_auto = std::find(ours.begin(), ours.end(), Algorithm::Auto) != ours.end();
  print_preamble(o);
  print_table(o, has_auto, sizes, index);
  const LinkCost model = shm_link_cost(cpu_cores());  // what auto weighs on this machine
  print_alpha_beta_fit(rows, model);
  print_wake_ups(o.ranks, index, model);
  return o.csv.empty() ? 0 : write_csv(o, rows);
}
