// Tensors: devices, factories, views, memory accounting, printing, seeded randomness.
#include <doctest/doctest.h>

#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"

using namespace dplab;

TEST_CASE("devices parse from strings and reject bad ones") {
  CHECK(Device("cpu") == Device(DeviceKind::CPU, 0));
  CHECK(Device("cpu:3").index == 3);
  CHECK(Device("cuda:1").is_cuda());
  CHECK(Device("cuda:1").str() == "cuda:1");
  CHECK_THROWS_WITH_AS(Device("gpu:1"), doctest::Contains("got \"gpu:1\""), Error);
  CHECK_THROWS_WITH_AS(Device("cpu:x"), doctest::Contains("cpu:x"), Error);
  CHECK_THROWS_AS(Device("cpu:-1"), Error);
  CHECK_THROWS_AS(Device("cpu:1000"), Error);
}

TEST_CASE("factories fill values and shapes") {
  Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.numel() == 6);
  CHECK(z.sum().item() == 0.0f);
  CHECK(ones({4}).sum().item() == 4.0f);
  CHECK(full({2, 2}, 2.5).at({1, 1}) == 2.5f);
  Tensor r = arange(5, {.dtype = DType::Int64});
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1, 10, 3).to_vector<float>() == std::vector<float>{1, 4, 7});
  Tensor v = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.at({1, 0}) == 4.0f);
  CHECK_THROWS_WITH_AS(from_vector(std::vector<float>{1, 2, 3}, {2, 2}),
                       doctest::Contains("3 values"), Error);
}

TEST_CASE("views share storage; narrow and chunk along dim 0 do not copy") {
  Tensor a = arange(12).reshape({3, 4});
  Tensor row = a.narrow(1, 1);
  CHECK(row.shape() == Shape{1, 4});
  CHECK(row.raw_data() == static_cast<float*>(a.raw_data()) + 4);
  row.fill_(7);
  CHECK(a.at({1, 2}) == 7.0f);
  Tensor flat = a.flatten();
  CHECK(flat.raw_data() == a.raw_data());
  CHECK(flat.shape() == Shape{12});
  CHECK(a.reshape({-1, 6}).shape() == Shape{2, 6});
  CHECK_THROWS_WITH_AS(a.reshape({5, -1}), doctest::Contains("cannot view [3, 4]"), Error);
}

TEST_CASE("chunk follows Tensor.chunk's rule") {
  auto sizes = [](int64_t rows, int64_t chunks) {
    std::vector<int64_t> s;
    for (auto& c : zeros({rows, 2}).chunk(chunks)) s.push_back(c.size(0));
    return s;
  };
  CHECK(sizes(30, 8) == std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 2});
  CHECK(sizes(30, 3) == std::vector<int64_t>{10, 10, 10});
  CHECK(sizes(3, 8) == std::vector<int64_t>{1, 1, 1});
  CHECK(sizes(31, 4) == std::vector<int64_t>{8, 8, 8, 7});
}

TEST_CASE("memory stats count every byte, per logical device") {
  Device d("cpu:7");
  reset_peak_memory_stats(d);
  int64_t before = memory_stats(d).allocated_bytes;
  int64_t count_before = memory_stats(d).alloc_count;
  {
    Tensor a = zeros({256}, {.device = d});
    CHECK(memory_stats(d).allocated_bytes == before + 1024);
    Tensor b = ones({1000}, {.dtype = DType::Int64, .device = d});
    CHECK(memory_stats(d).allocated_bytes == before + 1024 + 8000);
    CHECK(memory_stats(d).alloc_count == count_before + 2);
  }
  CHECK(memory_stats(d).allocated_bytes == before);
  CHECK(memory_stats(d).peak_bytes == before + 9024);
  reset_peak_memory_stats(d);
  CHECK(memory_stats(d).peak_bytes == before);
  // a copy to another logical device is counted there, not here
  Tensor src = ones({100}, {.device = "cpu:5"});
  Tensor moved = src.to(Device("cpu:6"));
  CHECK(moved.device() == Device("cpu:6"));
  CHECK(memory_stats(Device("cpu:6")).allocated_bytes >= 400);
  CHECK(moved.sum().item() == 100.0f);
}

TEST_CASE("item, at and errors name the shape") {
  Tensor a = from_vector(std::vector<float>{3.5f}, {1});
  CHECK(a.item() == 3.5f);
  CHECK_THROWS_WITH_AS(zeros({2, 2}).item(), doctest::Contains("[2, 2]"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 2}).at({2, 0}), doctest::Contains("out of range"), Error);
  Tensor i = from_vector(std::vector<int64_t>{42}, {});
  CHECK(i.item_int() == 42);
}

TEST_CASE("printing shows values, shape and device, and elides long dims") {
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  CHECK(fmt::format("{}", a) ==
        "tensor([[1.0000, 2.0000], [3.0000, 4.0000]], shape=[2, 2], device=cpu:0)");
  std::string big = fmt::format("{}", arange(100));
  CHECK(big.find("0.0000, 1.0000, 2.0000, ..., 97.0000, 98.0000, 99.0000") != std::string::npos);
  Tensor l = arange(3, {.dtype = DType::Int64});
  CHECK(fmt::format("{}", l) == "tensor([0, 1, 2], shape=[3], device=cpu:0, dtype=int64)");
  Tensor x = ones({2}, {.requires_grad = true});
  CHECK(fmt::format("{}", x).find("requires_grad=true") != std::string::npos);
  CHECK(fmt::format("{}", x * 2.0f).find("grad_fn=MulScalarBackward") != std::string::npos);
}

TEST_CASE("the generator is seeded and platform-independent") {
  Generator a(42), b(42), c(43);
  for (int i = 0; i < 10; ++i) CHECK(a.next_u64() == b.next_u64());
  CHECK(Generator(42).next_u64() != c.next_u64());
  // Pinned values: xoshiro256** seeded by splitmix64(42). A change here breaks every
  // saved experiment's reproducibility, so it must be deliberate.
  Generator g(42);
  CHECK(g.next_u64() == 0x15780b2e0c2ec716ULL);  // checked against a Python reference
  manual_seed(7);
  Tensor r1 = randn({1000});
  manual_seed(7);
  Tensor r2 = randn({1000});
  CHECK(r1.to_vector<float>() == r2.to_vector<float>());
  float mean = r1.mean().item();
  float var = (r1 * r1).mean().item() - mean * mean;
  CHECK(std::abs(mean) < 0.1f);
  CHECK(std::abs(var - 1.0f) < 0.1f);
  Tensor u = rand({1000});
  CHECK(max(u).item() < 1.0f);
  CHECK(-max(-u).item() >= 0.0f);
  Tensor p = randperm(10);
  auto pv = p.to_vector<int64_t>();
  std::sort(pv.begin(), pv.end());
  CHECK(pv == arange(10, {.dtype = DType::Int64}).to_vector<int64_t>());
}

TEST_CASE("in-place updates refuse leaves that require grad outside no_grad") {
  Tensor w = ones({3}, {.requires_grad = true});
  CHECK_THROWS_WITH_AS(w.add_(ones({3})), doctest::Contains("NoGradGuard"), Error);
  CHECK_THROWS_WITH_AS(zeros({3}).add_(ones({4})), doctest::Contains("[3]"), Error);
  CHECK_THROWS_WITH_AS(zeros({3}).add_(ones({3}, {.device = "cpu:1"})), doctest::Contains("cpu:1"),
                       Error);
}
