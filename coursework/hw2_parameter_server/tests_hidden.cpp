// tests_hidden.cpp: the hw2 tests kept for grading: torch.chunk's edge cases and cases drawn
// afresh each run, 2 to 4 devices against one device, a batch with fewer rows than devices,
// and the bytes every device sends and receives in a step against the parameter server's
// formulas.
#include <algorithm>
#include <random>

#include "grading.h"

using namespace hw2;
using namespace hw2::grading;

TEST_SUITE("hidden") {

// torch.chunk's rule, the judge's own, for the cases drawn afresh: no table of cases fits them.
std::vector<int64_t> torch_chunk(int64_t batch, int n) {
  std::vector<int64_t> sizes;
  for (int64_t each = (batch + n - 1) / n, left = batch; left > 0; left -= each) sizes.push_back(std::min(each, left));
  return sizes;
}

TEST_CASE("chunk_sizes: even splits and short batches (10 points)") {
  struct Case {
    int64_t batch;
    int n;
    std::vector<int64_t> want;
  };
  std::vector<Case> cases{Case{12, 4, {3, 3, 3, 3}}, Case{10, 4, {3, 3, 3, 1}}, Case{2, 3, {1, 1}},
                          Case{1, 4, {1}}, Case{5, 1, {5}}, Case{9, 2, {5, 4}}};
  std::mt19937_64 draw(seed());
  for (int k = 0; k < 6; ++k) {  // batches of 1 to 64 rows over 1 to 8 devices
    const int64_t batch = 1 + static_cast<int64_t>(draw() % 64);
    const int n = 1 + static_cast<int>(draw() % 8);
    cases.push_back({batch, n, torch_chunk(batch, n)});
  }
  for (const Case& c : cases) {
    const std::vector<int64_t> got = chunk_sizes(c.batch, c.n);
    CHECK_MESSAGE(got == c.want, fmt::format("chunk_sizes({}, {}) = [{}]; torch.chunk gives [{}]", c.batch, c.n,
                                             fmt::join(got, ", "), fmt::join(c.want, ", ")));
  }
}

TEST_CASE("2 to 4 devices for 3 steps train like one device (25 points)") {
  for (int n : {2, 3, 4})
    if (!check_equal_to_one_device(n, 3, 12)) return;
}

TEST_CASE("a batch with fewer rows than devices leaves devices idle and still trains right (10 points)") {
  check_equal_to_one_device(4, 2, 2);
}

TEST_CASE("every device moves a parameter server's bytes: the master (N-1)x a worker's weights and gradients (35 points)") {
  for (int n : {2, 4}) {
    const int64_t rows = 10;
    const Run run = train(n, 2, rows);
    const std::vector<int64_t> sizes{3, 3, 3, 1};  // torch.chunk of 10 rows over 4 (2 devices: 5, 5)
    const int64_t P = run.param_floats * 4;
    for (int i = 0; i < n; ++i) {
      int64_t sent = 0, received = 0;
      for (int w = 1; w < n; ++w) {
        const int64_t r = n == 2 ? 5 : sizes[w];
        const int64_t x_bytes = r * kIn * 4, out_bytes = r * kClasses * 4;
        if (i == 0) {  // the master: weights and x out, outputs in, output gradients out, gradients in
          sent += P + x_bytes + out_bytes;
          received += out_bytes + P;
        } else if (i == w) {  // a worker: the mirror image of its share
          received += P + x_bytes + out_bytes;
          sent += out_bytes + P;
        }
      }
      const int64_t got_sent = run.last_step.sent.count(i) ? run.last_step.sent.at(i) : 0;
      const int64_t got_received = run.last_step.received.count(i) ? run.last_step.received.at(i) : 0;
      CHECK_MESSAGE((got_sent == sent && got_received == received),
                    fmt::format("{} devices, a batch of {}: cpu:{} sent {} and received {} bytes in a step; a parameter "
                                "server moves {} and {} (the master sends the weights ({} bytes) to each of the {} "
                                "others and receives their gradients, sends each its rows of x and the gradient "
                                "of its outputs, and receives its outputs)", n, rows, i, got_sent, got_received,
                                sent, received, P, n - 1));
    }
  }
}

}  // TEST_SUITE
