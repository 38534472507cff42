// test_wire.cpp: the protocol between hw1's judge and its worker (common/wire.h), alone:
// what one side writes the other reads back, and every frame that lies (a length past the
// cap, a tensor larger than its bytes, too many dimensions, a short string, bytes left
// over, a frame cut short) is refused with an Error before anything is allocated, never
// a crash. The whole path, with a worker that writes such bytes, is CI's course_hw1 cheats.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "wire.h"

using course::wire::Error;
using course::wire::Reader;
using course::wire::Writer;

namespace {

// A payload of raw bytes, for frames no Writer would make.
struct Bytes {
  std::string s;
  Bytes& u8(std::uint8_t v) {
    s.push_back(static_cast<char>(v));
    return *this;
  }
  Bytes& i64(std::int64_t v) {
    s.append(reinterpret_cast<const char*>(&v), 8);
    return *this;
  }
  Bytes& u32(std::uint32_t v) {
    s.append(reinterpret_cast<const char*>(&v), 4);
    return *this;
  }
};

}  // namespace

TEST_CASE("tensors, numbers and strings come back as they were written") {
  const dplab::Tensor x = dplab::from_vector(std::vector<float>{1, -2, 3.5f, 4, 5, 6}, {2, 3});
  const dplab::Tensor t = dplab::from_vector(std::vector<std::int64_t>{0, 3, 4}, {3});
  Writer w;
  w.tensor(x);
  w.tensor(t);
  w.tensor(dplab::Tensor{});
  w.i64(-7);
  w.f32(0.25f);
  w.str("not implemented yet");
  Reader r(w.bytes());
  const dplab::Tensor x2 = r.tensor(), t2 = r.tensor(), u = r.tensor();
  CHECK(x2.shape() == x.shape());
  CHECK(x2.to_vector<float>() == x.to_vector<float>());
  CHECK(t2.dtype() == dplab::DType::Int64);
  CHECK(t2.to_vector<std::int64_t>() == t.to_vector<std::int64_t>());
  CHECK_FALSE(u.defined());
  CHECK(r.i64() == -7);
  CHECK(r.f32() == 0.25f);
  CHECK(r.str() == "not implemented yet");
  CHECK_NOTHROW(r.end());
}

TEST_CASE("a tensor that lies about its size is refused before it is allocated") {
  const std::int64_t side = std::int64_t{1} << 31;
  const std::string huge = Bytes{}.u8(1).u8(2).i64(side).i64(side).s;  // 2^62 floats in 0 bytes
  CHECK_THROWS_AS(Reader(huge).tensor(), Error);
  const std::string big = Bytes{}.u8(1).u8(8).i64(side).i64(side).i64(side).i64(side).i64(side).i64(side)
                              .i64(side).i64(side).s;  // would overflow 64 bits if multiplied
  CHECK_THROWS_AS(Reader(big).tensor(), Error);
  const std::string short_one = Bytes{}.u8(1).u8(1).i64(3).u32(0).s;  // 3 floats in 4 bytes
  CHECK_THROWS_AS(Reader(short_one).tensor(), Error);
  CHECK_THROWS_AS(Reader(Bytes{}.u8(1).u8(9).s).tensor(), Error);            // 9 dimensions
  CHECK_THROWS_AS(Reader(Bytes{}.u8(1).u8(1).i64(-1).s).tensor(), Error);    // a negative one
  CHECK_THROWS_AS(Reader(Bytes{}.u8(7).s).tensor(), Error);                  // an unknown dtype
  const std::string empty_dim = Bytes{}.u8(1).u8(2).i64(0).i64(side).s;       // 0 x 2^31: no bytes
  CHECK(Reader(empty_dim).tensor().numel() == 0);
}

TEST_CASE("strings, short payloads and leftovers are refused") {
  CHECK_THROWS_AS(Reader(Bytes{}.u32(5000).s).str(), Error);  // past kMaxString
  CHECK_THROWS_AS(Reader(Bytes{}.u32(10).s + "abc").str(), Error);
  CHECK_THROWS_AS(Reader(std::string()).u8(), Error);
  CHECK_THROWS_AS(Reader(std::string(3, '\0')).i64(), Error);
  const std::string two = Bytes{}.u8(1).u8(2).s;
  Reader r(two);
  r.u8();
  CHECK_THROWS_AS(r.end(), Error);
}

TEST_CASE("frames: a length past the cap is refused unread, a cut frame is named") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::string got;
  REQUIRE(course::wire::write_frame(fds[1], "hello"));
  CHECK(course::wire::read_frame(fds[0], got) == course::wire::Read::kFrame);
  CHECK(got == "hello");
  const std::uint32_t too_long = course::wire::kMaxFrame + 1;
  REQUIRE(::write(fds[1], &too_long, 4) == 4);
  CHECK(course::wire::read_frame(fds[0], got) == course::wire::Read::kTooLong);
  const std::uint32_t ten = 10;
  REQUIRE(::write(fds[1], &ten, 4) == 4);
  REQUIRE(::write(fds[1], "abc", 3) == 3);
  ::close(fds[1]);
  CHECK(course::wire::read_frame(fds[0], got) == course::wire::Read::kTruncated);
  CHECK(course::wire::read_frame(fds[0], got) == course::wire::Read::kClosed);
  ::close(fds[0]);
}
