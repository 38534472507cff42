// gloo_rank.cpp: one rank of the two-node tests (run_two_nodes.sh starts two dplab-run
// launchers, --nnodes 2 on 127.0.0.1, as two machines would). The mode says what to check:
//   collectives ENGINE: every collective against the values it must give (sizes that do not
//       divide by the world size, float32 and int64), and, on gloo, comm_stats() against
//       algorithms/cost.h; then a store connection with a wrong token must be refused;
//   ddp ENGINE: DDP trains exactly like one process on the whole batch (ddp_reference.h), and
//       the all-reduce traffic of this rank equals cost.h's formula for the algorithm that ran;
//   hang ENGINE: rank 1 stays out of an all_reduce; rank 0's CommError must come from the
//       timeout (not before it) and name rank 1 as the rank that stopped;
//   dead ENGINE: rank 1 exits before an all_reduce; rank 0's CommError must come from the
//       dead peer, not from the timeout, naming rank 0 and the collective (and rank 1 on
//       dplab's transport).
// In hang and dead modes the verdicts rest on events, not on how fast a loaded machine is:
// start-up has the long DPLAB_RENDEZVOUS_TIMEOUT and only the group under test has the short
// DPLAB_TIMEOUT (group_under_test); no other rank leaves before rank 0 has its error, and
// rank 0 holds SIGTERM until it has said its verdict, so that its launcher, told by node 1's
// that rank 1 died, cannot stop it first (run_two_nodes.sh gives the launchers a long grace
// period before SIGKILL).
// Prints "PASS <mode>" on success; any failed check exits 1 with the reason.
// Read next: run_two_nodes.sh, tests/ddp/ddp_reference.h.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/algorithms/cost.h"
#include "parallel/comm/init.h"
#include "parallel/rendezvous/tcp_store.h"
#include "tests/ddp/ddp_reference.h"

using namespace dplab;
using namespace dplab::parallel;
using namespace dplab::parallel::testing;

namespace {

int g_rank = -1;

#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fflush(stdout);                                                             \
      std::fprintf(stderr, "rank %d: FAILED %s: %s\n", g_rank, #cond,                  \
                   fmt::format(__VA_ARGS__).c_str());                                  \
      std::fflush(stderr);                                                             \
      std::_Exit(1);                                                                   \
    }                                                                                  \
  } while (0)

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// x[i] = rank * 1000 + i (exact in float32 for the sizes here)
Tensor ramp(int64_t n, int rank, DType dtype = DType::Float32) {
  if (dtype == DType::Int64) {
    std::vector<int64_t> v(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = rank * 1000 + i % 997;
    return from_vector(v, {n});
  }
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = float(rank * 1000 + i % 997);
  return from_vector(v, {n});
}
std::vector<float> values(const Tensor& t) {
  if (t.dtype() != DType::Int64) return t.to_vector<float>();
  std::vector<float> out;
  for (int64_t x : t.to_vector<int64_t>()) out.push_back(float(x));
  return out;
}

void check_collectives(ProcessGroup& pg, const std::string& engine) {
  const int r = pg.rank(), n = pg.size();
  for (int64_t len : {int64_t{1}, int64_t{10}, int64_t{1000003}}) {
    for (DType dtype : {DType::Float32, DType::Int64}) {
      Tensor t = ramp(len, r, dtype);
      pg.reset_comm_stats();
      pg.all_reduce(t);
      std::vector<float> got = values(t);
      for (int64_t i = 0; i < len; i += 1 + len / 50) {
        float want = 0;
        for (int k = 0; k < n; ++k) want += float(k * 1000 + i % 997);
        if (i >= int64_t(got.size())) break;
        EXPECT(got[i] == want, "all_reduce(sum) len {} [{}]: got {}, want {}", len, i, got[i], want);
      }
      if (engine == "gloo") {
        const Traffic want = ring_all_reduce_cost(t.nbytes(), element_size(dtype), r, n);
        const auto s = pg.comm_stats().per_collective.at("all_reduce");
        EXPECT(s.bytes_sent == want.sent && s.bytes_received == want.received,
               "comm_stats: sent {} received {}, cost.h's ring says {} and {}", s.bytes_sent,
               s.bytes_received, want.sent, want.received);
      }
    }
  }
  {  // avg, max, min; and bcube (asked for as halving-doubling) on gloo
    Tensor a = ramp(1001, r), mx = ramp(1001, r), mn = ramp(1001, r), hd = ramp(1001, r);
    pg.all_reduce(a, ReduceOp::Avg);
    pg.all_reduce(mx, ReduceOp::Max);
    pg.all_reduce(mn, ReduceOp::Min);
    pg.all_reduce(hd, ReduceOp::Sum, Algorithm::HalvingDoubling);
    for (int64_t i : {0, 500, 1000}) {
      float sum = 0;
      for (int k = 0; k < n; ++k) sum += float(k * 1000 + i % 997);
      EXPECT(std::abs(values(a)[i] - sum / n) < 1e-3, "avg [{}]: {} vs {}", i, values(a)[i], sum / n);
      EXPECT(values(mx)[i] == float((n - 1) * 1000 + i % 997), "max [{}]", i);
      EXPECT(values(mn)[i] == float(i % 997), "min [{}]", i);
      EXPECT(values(hd)[i] == sum, "all_reduce({}) [{}]", pg.all_reduce_algorithm(4004, Algorithm::HalvingDoubling), i);
    }
  }
  {  // broadcast from the last rank
    Tensor b = ramp(777, r);
    pg.broadcast(b, n - 1);
    EXPECT(values(b)[5] == float((n - 1) * 1000 + 5), "broadcast: got {}", values(b)[5]);
  }
  {  // reduce to rank 1: others unchanged
    Tensor t = ramp(33, r);
    pg.reduce(t, 1);
    float want = r == 1 ? float(n * (n - 1) / 2 * 1000 + 7 * n) : float(r * 1000 + 7);
    EXPECT(values(t)[7] == want, "reduce: [7] got {} want {}", values(t)[7], want);
  }
  {  // all_gather, gather to 0, scatter from 0
    std::vector<Tensor> outs;
    for (int k = 0; k < n; ++k) outs.push_back(zeros({13}));
    pg.all_gather(outs, ramp(13, r));
    for (int k = 0; k < n; ++k)
      EXPECT(values(outs[k])[3] == float(k * 1000 + 3), "all_gather [{}]", k);
    std::vector<Tensor> g;
    for (int k = 0; k < n; ++k) g.push_back(zeros({9}));
    pg.gather(g, ramp(9, r), 0);
    if (r == 0)
      for (int k = 0; k < n; ++k) EXPECT(values(g[k])[8] == float(k * 1000 + 8), "gather [{}]", k);
    std::vector<Tensor> parts;
    for (int k = 0; k < n; ++k) parts.push_back(ramp(5, k + 10));
    Tensor mine = zeros({5});
    pg.scatter(mine, parts, 0);
    EXPECT(values(mine)[2] == float((r + 10) * 1000 + 2), "scatter: {}", values(mine)[2]);
  }
  {  // reduce_scatter: block k of every rank, summed, lands on rank k
    std::vector<Tensor> ins;
    for (int k = 0; k < n; ++k) ins.push_back(ramp(11, r + k));
    Tensor out = zeros({11});
    pg.reduce_scatter(out, ins);
    float want = 0;
    for (int k = 0; k < n; ++k) want += float((k + r) * 1000 + 4);
    EXPECT(values(out)[4] == want, "reduce_scatter: {} want {}", values(out)[4], want);
  }
  pg.barrier();
  {  // send/recv around the ring, twice (messages keep their order)
    for (int round = 0; round < 2; ++round) {
      Tensor out = ramp(257, r + round), in = zeros({257});
      if (r % 2 == 0) {
        pg.send(out, (r + 1) % n);
        pg.recv(in, (r + n - 1) % n);
      } else {
        pg.recv(in, (r + n - 1) % n);
        pg.send(out, (r + 1) % n);
      }
      EXPECT(values(in)[256] == float(((r + n - 1) % n + round) * 1000 + 256), "recv round {}", round);
    }
  }
  // A stranger without the job's token is refused by the store, and the job goes on.
  if (r == 0) {
    const char* host = std::getenv("MASTER_ADDR");
    const int port = std::atoi(std::getenv("MASTER_PORT"));
    bool refused = false;
    try {
      TCPStore stranger(host, port, false, Seconds(3), "not-the-job-token-0123456789");
    } catch (const CommError& e) {
      refused = contains(e.what(), "refused");
    }
    EXPECT(refused, "a store connection with a wrong token was not refused");
  }
  Tensor last = ramp(3, r);
  pg.all_reduce(last);
  EXPECT(values(last)[0] == float(n * (n - 1) / 2 * 1000), "all_reduce after the stranger");
}

void check_ddp(std::shared_ptr<ProcessGroup> pg) {
  const int r = pg->rank(), world = pg->size();
  const Params got = ddp_train(pg), want = single_process(world, 1);
  for (std::size_t k = 0; k < got.size(); ++k)
    for (std::size_t i = 0; i < got[k].size(); ++i)
      EXPECT(std::abs(got[k][i] - want[k][i]) <= 1e-5 + 1e-5 * std::abs(want[k][i]),
             "param {}[{}]: DDP {} vs one process {}", k, i, got[k][i], want[k][i]);
  // one all_reduce of a size that does not divide by 4, counted against its formula
  const int64_t len = 300007;
  Tensor t = ramp(len, r);
  pg->reset_comm_stats();
  pg->all_reduce(t);
  std::string algo = pg->all_reduce_algorithm(t.nbytes());
  if (algo.rfind("auto:", 0) == 0) algo = algo.substr(5);
  Traffic want_t = pg->engine() == "gloo"
                       ? ring_all_reduce_cost(t.nbytes(), 4, r, world)
                       : all_reduce_cost(algorithm_from_name(algo), t.nbytes(), 4, r, world,
                                         std::atoi(std::getenv("LOCAL_WORLD_SIZE")));
  const auto s = pg->comm_stats().per_collective.at("all_reduce");
  EXPECT(s.bytes_sent == want_t.sent && s.bytes_received == want_t.received,
         "{} traffic: sent {} received {}; cost.h: {} and {}", algo, s.bytes_sent,
         s.bytes_received, want_t.sent, want_t.received);
  EXPECT(values(t)[len - 1] == float(world * (world - 1) / 2 * 1000 + world * ((len - 1) % 997)),
         "all_reduce({}) value", algo);
  if (pg->engine() != "gloo")
    EXPECT(pg->transport_name() == "shm+gloo" || pg->transport_name() == "thread+gloo",
           "transport: {}", pg->transport_name());
}

// The group hang and dead modes test. The default group is made with the rendezvous
// timeout (the suite's 60 s): exec'ing and loading the ranks of two launchers, and gloo's
// connect, are not what these modes check. After every rank has met on it (a barrier), the
// group under test is made with DPLAB_TIMEOUT (the suite's short one): its set-up then
// starts on every rank at once, as a collective does, and every rank has it before the test.
std::shared_ptr<ProcessGroup> group_under_test(const std::string& engine) {
  const Seconds collectives = resolve_timeout(std::nullopt);
  init_process_group(
      {.engine = engine, .timeout = resolve_rendezvous_timeout(std::nullopt, collectives)});
  default_process_group().barrier();
  const int world = get_world_size(), per_node = std::atoi(std::getenv("LOCAL_WORLD_SIZE"));
  auto store = default_store();
  auto pg = create_process_group(store, get_rank(), world,
                                 {.engine = engine,
                                  .timeout = collectives,
                                  .ranks_per_node = per_node < world ? per_node : 0});
  store->set_timeout(collectives);  // as init_process_group leaves it
  // Every rank holds its group under test before any fails: gloo's connect returns on one side
  // of a pair while the other may still finish its handshake, and a rank that died then (on a
  // busy machine) failed the other's set-up instead of its collective.
  default_process_group().barrier();
  return pg;
}

// Rank 0 files its verdict here before it prints it; the other ranks leave only after that,
// so no rank's exit can reach rank 0 as an error of its own.
const std::string kVerdictKey = "gloo_rank/rank0_has_its_error";

// Returns once rank 0 has filed its verdict, or its store is gone (rank 0 exited), or after a
// guard of 60 s against a hang.
void wait_for_rank0_verdict() {
  auto store = default_store();
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  try {
    while (!store->check({kVerdictKey}) && std::chrono::steady_clock::now() < guard)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (const CommError&) {
  }
}

void check_failure(ProcessGroup& pg, const std::string& mode, const std::string& engine) {
  const double timeout = resolve_timeout(std::nullopt).count();
  if (g_rank == 1) {
    if (mode == "dead") std::_Exit(3);  // gone, without a word
    wait_for_rank0_verdict();  // out of the all_reduce until rank 0 has its error
    std::_Exit(0);
  }
  Tensor t = ramp(100000, g_rank);
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    pg.all_reduce(t);
  } catch (const CommError& e) {
    what = e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_rank != 0) {  // ranks 2 and 3 of the 2x2 case: they too wait on rank 1
    std::printf("rank %d: after %.2f s: %s\n", g_rank, took, what.c_str());
    std::fflush(stdout);
    wait_for_rank0_verdict();
    std::_Exit(what.empty() ? 1 : 0);
  }
  try {
    default_store()->set(kVerdictKey, "1");
  } catch (const CommError&) {
  }
  std::printf("rank %d: after %.2f s: %s\n", g_rank, took, what.c_str());
  EXPECT(!what.empty(), "all_reduce with a {} peer did not throw", mode);
  EXPECT(contains(what, fmt::format("rank {}", g_rank)) && contains(what, "all_reduce"),
         "the error names neither this rank nor the collective: {}", what);
  const bool timed_out = contains(what, "imed out") || contains(what, "within the timeout");
  if (mode == "hang") {
    // A wait cannot end before its timeout: an earlier error came from something else.
    EXPECT(took >= timeout - 0.01, "the error came after {:.2f} s, before the timeout of {} s: {}",
           took, timeout, what);
    if (engine == "gloo") {  // the watchdog's diagnosis, then gloo's error
      EXPECT(contains(what, "rank 1 stopped making progress"), "rank 1 not named: {}", what);
    } else {  // the wait's timeout, then the node transport's diagnosis
      EXPECT(timed_out && contains(what, "across the nodes: rank 1 stopped making progress"),
             "rank 1 not named: {}", what);
    }
  } else {  // dead: the peer's closed connection ends the wait, not the timeout
    EXPECT(!timed_out && !contains(what, "stopped making progress"),
           "a dead peer was found by the timeout ({} s), not by its closed connection: {}",
           timeout, what);
    if (engine != "gloo") EXPECT(contains(what, "rank 1"), "peer not named: {}", what);
  }
  std::printf("PASS %s %s\n", mode.c_str(), engine.c_str());
  std::fflush(stdout);
  std::_Exit(0);  // the group is broken: no exit barrier with a rank that is gone
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gloo_rank collectives|ddp|hang|dead ENGINE\n");
    return 2;
  }
  const std::string mode = argv[1], engine = argv[2];
  const bool failure_mode = mode == "hang" || mode == "dead";
  const char* env_rank = std::getenv("RANK");
  if (failure_mode && env_rank != nullptr && std::atoi(env_rank) == 0) {
    // Before any thread starts, so that every thread inherits it: SIGTERM from the launcher
    // stays pending until rank 0 exits after its verdict (SIGKILL after the grace period
    // still ends a hang).
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);
  }
  try {
    if (failure_mode) {
      auto pg = group_under_test(engine);
      g_rank = pg->rank();
      check_failure(*pg, mode, engine);
    }
    auto pg = init_process_group({.engine = engine});
    g_rank = pg->rank();
    if (mode == "collectives") {
      check_collectives(*pg, engine);
    } else if (mode == "ddp") {
      check_ddp(pg);
    }
    destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank >= 0 ? g_rank : env_rank ? std::atoi(env_rank) : -1,
                 e.what());
    return 1;
  }
  std::printf("PASS %s %s rank %d\n", mode.c_str(), engine.c_str(), g_rank);
  return 0;
}
