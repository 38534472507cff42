// compare.h: the shared vocabulary of dplab-compare, the PS-vs-ring comparison (issue 8).
// One Config says what to train; each mode (single device, DataParallel, DDP star, DDP ring)
// turns it into one RunResult per device count N; report.cpp prints and writes them, and
// alpha_beta.h projects them to N = 1024. Every mode trains the same model from the same
// initial weights on the same global batches, so parameters and accuracy must agree.
// Read next: training.h (the loop every mode shares), then run_ddp.cpp (processes).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/optim/optimizer.h"
#include "framework/tensor/device.h"

namespace dplab::compare {

struct Config {
  std::string model = "mlp";     // mlp | cnn | resnet | toy | wide_mlp | gpt (workload.h)
  std::vector<int> ns{1, 2, 4};  // device counts
  std::vector<std::string> modes{"single", "dp", "star", "ring"};
  int64_t steps = 100;          // optimizer steps per run (same in every mode)
  int64_t warmup = 3;           // first steps left out of the timing (allocations)
  int64_t global_batch = 256;   // samples per step in all; each of N devices gets global/N
  int64_t train_limit = 12800;  // training subset of Fashion-MNIST
  int64_t test_limit = 2000;    // test subset (gpt: validation windows) for the final figures
  double lr = 0.05;
  double momentum = 0.9;
  std::string optimizer = "sgd";  // sgd (with momentum) | adam (lr = cfg.lr)
  double bucket_cap_mb = 25.0;    // DDP bucket size
  std::string device = "cpu";     // cpu | cuda
  // Emulated link per device / rank in Gbit/s (parallel/transport/link_model.h), so that the
  // parameter server's single link shows as it does between machines. < 0: 10 on cpu (10 GbE
  // between machines), none on cuda; 0: none (raw shared memory, see the README).
  double link_gbps = -1;
  std::string out = "results";
  // Fashion-MNIST directory, or with --model gpt a text file; empty: the search path, or the
  // Jargon File (datasets/text_corpus.h)
  std::string data_root = "";
  // --model gpt: its shape, 0 for models::byte_gpt_config()'s; a sample is block_size bytes
  int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0;
  bool trace = false;          // write trace.json (Chrome trace)
  bool projection = true;      // ping-pong, alpha-beta fit, projection to 1024
  bool plots = true;           // run plot_results.py
  uint64_t seed = 0;           // the initial weights
  // fp32 | fp16 | bf16. 16-bit runs are Apex O2 (amp/master_weights.h): the model's weights
  // (batch norm's aside) and its gradients are 16-bit, so the all-reduces move half the
  // bytes and activations take half the memory; the optimizer updates float32 master
  // copies (their bytes count as optimizer state); fp16 adds a GradScaler.
  std::string precision = "fp32";
  // Mode ps (run_ps.cpp): server counts ("N": as many as devices) and placements
  // (colocated: S of the N training ranks also serve; separate: S more processes serve).
  std::vector<std::string> servers{"1", "N"};
  std::vector<std::string> ps_placements{"colocated"};
  // emulated | netns | netns:RATE (netns_links.h): the DDP modes also run with every rank in
  // a network namespace behind a real tc-shaped link. netns_bed: set in the workers only
  // (--worker-netns), the bed whose node `rank` each rank enters.
  std::string links = "emulated";
  std::string netns_bed = "";
};

// One device (single, dp) or one rank (star, ring).
struct DeviceFigures {
  int64_t peak_bytes = 0;
  int64_t bytes_sent = 0, bytes_received = 0;                // all traffic of this device / rank
  int64_t weight_bytes_sent = 0, weight_bytes_received = 0;  // weights & gradients only
  // What holds the memory (fill_memory in training.cpp): parameters, gradients (full, or
  // ZeRO-2's shard), optimizer state (ZeRO: this rank's shard) after training, and the
  // activations of a step at their peak, the end of forward (ActivationMeter, training.h).
  // The peak's remainder is backward's and communication's transient buffers.
  int64_t param_bytes = 0, grad_bytes = 0, optim_state_bytes = 0, activation_bytes = 0;
};

struct RunResult {
  std::string mode;  // single | dp | star | ring | zero1 | zero2 | mpi | nccl | ps-s<S>[-sep]
  std::string precision = "fp32";  // Config::precision, a column of results.csv
  int n = 1;
  int64_t steps = 0, timed_steps = 0, global_batch = 0;
  double seconds = 0;  // median step time x timed_steps (training.h: median)
  double compute_s = 0, comm_s = 0, wait_s = 0;  // per step, see report.cpp for meanings
  std::vector<DeviceFigures> devices{};          // index = device / rank; 0 = master for dp/star
  double test_accuracy = 0, test_loss = 0;
  int64_t param_count = 0;
  double predicted_step_s = -1;  // alpha-beta prediction (DDP rows), -1: none
  double predicted_fair_s = -1;  // real links, one master: its step on a fairly shared link
  double link_gbps = 0;          // the emulated link this run crossed (0: none)
  int servers = 0;                // ps: S; 0 for the other modes
  bool separate_servers = false;  // ps: the S servers are processes of their own
  std::string link = "none";     // none | emulated | netns (real shaped links, netns_links.h)
  // netns rows: bytes each rank's link carried out / in over the timed steps, as the kernel
  // counts them (TCP/IP headers and acknowledgements included)
  std::vector<int64_t> wire_sent{}, wire_received{};
  double samples_per_s() const {
    return seconds > 0 ? double(timed_steps * global_batch) / seconds : 0;
  }
  double step_s() const { return timed_steps > 0 ? seconds / double(timed_steps) : 0; }
};

// A run's name in file names and tables: its mode, "_netns" added for the real-link twin.
inline std::string run_label(const RunResult& r) {
  return r.link == "netns" ? r.mode + "_netns" : r.mode;
}

// The emulated link a run of `mode` on n devices crosses, in Gbit/s: cfg.link_gbps (or its
// default for the device kind) for dp, star, ring, zero and ps with n > 1; 0 for a lone device and
// for mpi and nccl, which move their bytes themselves.
double link_gbps(const Config& cfg, const std::string& mode, int n);
// Device k of the configured kind ("cpu" -> cpu:k, "cuda" -> cuda:k).
Device device_of(const Config& cfg, int k);
// Where each run leaves its files: <out>/runs/<mode>_n<N>[_rank<r>].<ext>
std::string run_file(const Config& cfg, const std::string& mode, int n, int rank,
                     const std::string& ext);

// The optimizer of every mode but zero1/zero2: SGD (cfg.lr, cfg.momentum) or Adam (cfg.lr).
std::unique_ptr<optim::Optimizer> make_optimizer(const Config& cfg, std::vector<Tensor> params);
// Fills d's memory split after training: parameter and gradient bytes of params (plus
// extra_grad_bytes, ZeRO-2's shards) and the optimizer's state_bytes.
void fill_memory(DeviceFigures& d, const std::vector<Tensor>& params, int64_t state_bytes,
                 int64_t extra_grad_bytes);
int64_t optimizer_state_bytes(const optim::Optimizer& opt);

// The modes (run_local.cpp: single and dp; run_ddp.cpp; run_ps.cpp). The DDP ones start N
// processes of this program in its hidden --worker mode and read back each rank's result file.
RunResult run_single(const Config& cfg);
RunResult run_data_parallel(const Config& cfg, int n);
RunResult run_ddp(const Config& cfg, const std::string& algo, int n, const std::string& self_exe,
                  const std::vector<std::string>& worker_args);
// Runs `self_exe args...` in its own process group and waits (deadline 30 minutes); throws
// Error naming `label` when it exits non-zero or is killed.
// Runs self_exe with args (under `launcher`, e.g. {"mpirun", "-np", "4"}, when given).
void run_worker_process(const std::string& self_exe, std::vector<std::string> args,
                        const std::string& label, const std::vector<std::string>& launcher = {});
// The body of `dplab-compare --worker ring|star --worker-n N`: spawns N ranks and trains.
void ddp_worker_main(const Config& cfg, const std::string& algo, int n);

// Mode ps (run_ps.cpp). A run's label is ps-s<S> (co-located) or ps-s<S>-sep (separate);
// resolve_servers turns a --servers entry ("2", "N") into S for n devices (throws on others).
std::string ps_label(int servers, bool separate);
bool is_ps_label(const std::string& mode);
int resolve_servers(const std::string& spec, int n);
int ps_world(const std::string& label, int n);  // n, or n + S separate servers
RunResult run_ps(const Config& cfg, int n, int servers, bool separate, const std::string& self_exe,
                 const std::vector<std::string>& worker_args);
// The body of `dplab-compare --worker ps-s<S>[-sep] --worker-n N`: spawns the ranks and trains.
void ps_worker_main(const Config& cfg, const std::string& label, int n);

// Rank files: "key value..." lines, written by a rank, read by the parent.
void write_rank_file(const std::string& path, const RunResult& r, int rank);
// Reads one rank's file into r (scalars from rank 0, devices[rank] from every rank).
void read_rank_file(const std::string& path, RunResult& r, int rank);

// Parameters as raw float32 (all parameters concatenated, registration order), and back.
void write_params(const std::string& path, const std::vector<float>& values);
std::vector<float> read_params(const std::string& path);

}  // namespace dplab::compare
