// test_collectives_shm.cpp: the shm transport with real forked processes, N = 1..4:
// all_reduce ring and star, broadcast, all_gather, reduce_scatter, barrier, send/recv
// against a serial reference; a rank that throws and a rank that is SIGKILLed make the
// others fail with a CommError naming it, propagated rather than timed out; nothing is left in
// /dev/shm afterwards. The thread tests cover the protocol in depth; these cover processes.
// Read next: benchmarks/allreduce.cpp.
#include <dirent.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "framework/tensor/tensor.h"
#include "parallel/comm/process_group.h"
#include "parallel/transport/mailbox_transport.h"
#include "tests/parallel/collective_test_util.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::Outcome;
using dplab::parallel::testing::run_processes;

using dplab::parallel::testing::dplab_segments_in_dev_shm;

namespace {

float value(int rank, int64_t i) { return static_cast<float>((rank * 5 + i * 7) % 13 - 6); }

Tensor make(int rank, int64_t n) {
  Tensor t = Tensor::empty({n});
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = value(rank, i);
  return t;
}

// In a child a failed DPLAB check would be lost; throw instead, the harness reports it.
void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed in child: " + what);
}

void check_all_ok(const std::vector<Outcome>& out) {
  for (std::size_t r = 0; r < out.size(); ++r) {
    CAPTURE(r);
    CAPTURE(out[r].message);
    CHECK(out[r].ok);
  }
}

}  // namespace

TEST_CASE("shm: all_reduce ring and star across 1..4 processes, odd and zero sizes") {
  const int before = dplab_segments_in_dev_shm();
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    check_all_ok(run_processes(
        n,
        [n](ProcessGroup& pg) {
      expect(pg.transport_name() == "shm", "transport is " + pg.transport_name());
      for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100003}}) {
        for (Algorithm a : {Algorithm::Ring, Algorithm::Star}) {
          Tensor t = make(pg.rank(), size);
          pg.all_reduce(t, ReduceOp::Sum, a);
          const float* p = t.data<float>();
          for (int64_t i = 0; i < size; ++i) {
            float ref = 0;
            for (int r = 0; r < n; ++r) ref += value(r, i);
            expect(p[i] == ref, fmt::format("{} size {} element {}: {} != {}", algorithm_name(a),
                                            size, i, p[i], ref));
          }
        }
      }
      // a tensor of 4 segments per chunk, and the exact ring volume for divisible sizes
      pg.reset_comm_stats();
      Tensor big = make(pg.rank(), 12 * 32768);
      pg.all_reduce(big, ReduceOp::Max, Algorithm::Ring);
      int64_t S = big.nbytes();
      expect(pg.comm_stats().total.bytes_sent == 2 * (n - 1) * S / n, "ring volume");
        },
        {.segment_bytes = kSegmentBytes}));  // 128 KiB slots: 12 * 32768 floats is 3 per rank
  }
  CHECK(dplab_segments_in_dev_shm() == before);  // unlinked as soon as all ranks mapped it
}

TEST_CASE("DPLAB_SEGMENT_KB and DPLAB_WAIT take whole numbers and nothing else") {
  if (std::getenv("DPLAB_SEGMENT_KB") != nullptr || std::getenv("DPLAB_WAIT") != nullptr) return;
  for (const char* bad : {"1x", "0", "65537", " 4", "4.5", ""}) {
    if (*bad == '\0') continue;  // unset-like: the default
    ::setenv("DPLAB_SEGMENT_KB", bad, 1);
    CHECK_THROWS_WITH_AS(
        shm_segment_bytes(2),
        doctest::Contains(
            fmt::format("DPLAB_SEGMENT_KB: expected the slot size in KiB, 1 .. 65536, got \"{}\"",
                        bad)
                .c_str()),
        Error);
  }
  ::setenv("DPLAB_SEGMENT_KB", "64", 1);
  CHECK(shm_segment_bytes(2) == 64 * 1024);
  ::unsetenv("DPLAB_SEGMENT_KB");
  // wait_policy reads DPLAB_WAIT once per process: each value in a child of its own
  for (const char* bad : {"5,5junk", "5", "a,b", "5,-1", ",5", "5,5,5"}) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setenv("DPLAB_WAIT", bad, 1);
      try {
        wait_policy(2);
      } catch (const Error& e) {
        const std::string want =
            fmt::format("DPLAB_WAIT: expected \"spin_us,yield_us\" (two integers "
                        "in 0..1000000, e.g. 50,0), got \"{}\"",
                        bad);
        _exit(std::string(e.what()).find(want) != std::string::npos ? 0 : 2);
      }
      _exit(1);  // accepted
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_MESSAGE(WIFEXITED(st), bad);
    CHECK_MESSAGE(
        WEXITSTATUS(st) == 0,
        "DPLAB_WAIT=" << bad << (WEXITSTATUS(st) == 1 ? " was accepted" : " gave another message"));
  }
}

TEST_CASE("shm: the default slot is 1 MiB while every rank has a core, 256 KiB past that") {
  if (std::getenv("DPLAB_SEGMENT_KB") != nullptr) return;  // the user's size, for measuring
  const int cores = cpu_cores();
  CHECK(shm_segment_bytes(1) == std::size_t{1} << 20);
  CHECK(shm_segment_bytes(cores) == std::size_t{1} << 20);
  CHECK(shm_segment_bytes(cores + 1) == std::size_t{256} << 10);
  // a group with the default slots and one with small slots agree, over many segments
  for (std::size_t slot : {std::size_t{0}, std::size_t{4096}}) {
    CAPTURE(slot);
    check_all_ok(run_processes(
        3,
        [](ProcessGroup& pg) {
      for (Algorithm a : {Algorithm::Ring, Algorithm::HalvingDoubling, Algorithm::OneShot}) {
        Tensor t = make(pg.rank(), 300001);
        pg.all_reduce(t, ReduceOp::Sum, a);
        const float* p = t.data<float>();
        for (int64_t i = 0; i < t.numel(); i += 997)
          expect(p[i] == value(0, i) + value(1, i) + value(2, i),
                 fmt::format("{} element {}", algorithm_name(a), i));
      }
        },
        {.segment_bytes = slot}));
  }
  std::vector<Outcome> bad = run_processes(2, [](ProcessGroup&) {}, {.segment_bytes = 1001});
  for (const Outcome& o : bad) {
    CHECK_FALSE(o.ok);
    CHECK(o.message.find("segment_bytes must be a multiple of 8") != std::string::npos);
  }
}

TEST_CASE("shm: broadcast, all_gather, reduce_scatter, barrier, send/recv") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    check_all_ok(run_processes(n, [n](ProcessGroup& pg) {
      const int r = pg.rank();
      const int64_t size = 40001;
      Tensor b = make(r, size);
      pg.broadcast(b, n - 1);
      expect(b.to_vector<float>() == make(n - 1, size).to_vector<float>(), "broadcast");

      std::vector<Tensor> outs, ins;
      for (int i = 0; i < n; ++i) {
        outs.push_back(Tensor::empty({size}));
        ins.push_back(make(r + i, size));
      }
      pg.all_gather(outs, make(r, size));
      for (int i = 0; i < n; ++i)
        expect(outs[i].to_vector<float>() == make(i, size).to_vector<float>(), "all_gather");

      Tensor block = Tensor::empty({size});
      pg.reduce_scatter(block, ins, ReduceOp::Sum);
      const float* p = block.data<float>();
      for (int64_t i = 0; i < size; ++i) {
        float ref = 0;
        for (int q = 0; q < n; ++q) ref += value(q + r, i);  // rank q's ins[r]
        expect(p[i] == ref, "reduce_scatter");
      }

      pg.barrier();
      if (n > 1) {
        Tensor got = Tensor::empty({size});
        if (r == 0) {
          pg.send(make(0, size), 1);
          if (n > 2) pg.recv(got, n - 1);
        } else {
          pg.recv(got, r - 1);
          expect(got.to_vector<float>() == make(r - 1, size).to_vector<float>(), "recv");
          if (r + 1 < n || n > 2) pg.send(make(r, size), (r + 1) % n);
        }
      }
      pg.barrier();
    }));
  }
}

// In the two tests below the collectives wait the harness's long timeout (30 s): failing
// fast shows in the message, which says the failure was propagated (the failed rank's own
// reason, or that its process died) and not "timed out", whatever the load made of the
// seconds. A group that did not propagate would end only at the timeout, saying so.
TEST_CASE("shm: a rank that throws makes the others fail fast with a message naming it") {
  for (Algorithm a : {Algorithm::Ring, Algorithm::Star}) {
    CAPTURE(algorithm_name(a));
    auto out = run_processes(
        4,
        [](ProcessGroup& pg) {
      if (pg.rank() == 2) throw std::runtime_error("rank 2 failed on purpose");
      Tensor t = make(pg.rank(), 300000);
      pg.all_reduce(t);
        },
        {.engine = algorithm_name(a)});
    CHECK(out[2].message == "rank 2 failed on purpose");
    for (int r : {0, 1, 3}) {
      CAPTURE(r);
      CAPTURE(out[r].message);
      CHECK_FALSE(out[r].ok);
      CHECK(out[r].message.find("all_reduce") != std::string::npos);
      CHECK(out[r].message.find("failed because rank 2 failed") != std::string::npos);
      CHECK(out[r].message.find("timed out") == std::string::npos);
    }
  }
}

TEST_CASE("shm: a SIGKILLed rank is detected by its peers, not waited for until the timeout") {
  const int before = dplab_segments_in_dev_shm();
  for (Algorithm a : {Algorithm::Ring, Algorithm::Star}) {
    CAPTURE(algorithm_name(a));
    auto out = run_processes(
        4,
        [](ProcessGroup& pg) {
      Tensor t = make(pg.rank(), 300000);
      pg.all_reduce(t);  // one that works, so the kill lands mid-run
      if (pg.rank() == 3) raise(SIGKILL);
      pg.all_reduce(t);
        },
        {.engine = algorithm_name(a)});
    CHECK(out[3].signal == SIGKILL);
    for (int r : {0, 1, 2}) {
      CAPTURE(r);
      CAPTURE(out[r].message);
      CHECK_FALSE(out[r].ok);
      CHECK(out[r].message.find("rank 3") != std::string::npos);
      CHECK(out[r].message.find("died") != std::string::npos);
      CHECK(out[r].message.find("timed out") == std::string::npos);
    }
  }
  CHECK(dplab_segments_in_dev_shm() == before);
}
