// store_wire.cpp: encoding requests and parsing them incrementally (see store_wire.h).
// The parser is a four-stage machine: the op byte, the argument count, then for each
// argument its length and its bytes. Each stage checks its number against the limits the
// moment the number is complete, so an oversized value is refused after its 4-byte length,
// before any of it is held.
// Read next: tcp_store_server.cpp.
#include "parallel/rendezvous/store_wire.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

#include "framework/error.h"

namespace dplab::parallel::detail {

namespace {
constexpr size_t kMaxNumberChars = 32;  // a timeout in ms or an add's delta, in decimal
}

const char* op_name(StoreOp op) {
  switch (op) {
    case StoreOp::Set: return "set";
    case StoreOp::Get: return "get";
    case StoreOp::Add: return "add";
    case StoreOp::Wait: return "wait";
    case StoreOp::Check: return "check";
  }
  return "?";
}

void put_u32(std::string& out, uint32_t v) {
  uint32_t be = htonl(v);
  out.append(reinterpret_cast<const char*>(&be), 4);
}

uint32_t get_u32(const char* p) {
  uint32_t be;
  std::memcpy(&be, p, 4);
  return ntohl(be);
}

std::string encode_request(StoreOp op, const std::vector<std::string>& args) {
  std::string out(1, static_cast<char>(op));
  put_u32(out, static_cast<uint32_t>(args.size()));
  for (const auto& a : args) {
    put_u32(out, static_cast<uint32_t>(a.size()));
    out += a;
  }
  return out;
}

std::string human_bytes(size_t n) {
  if (n < 1024) return fmt::format("{} bytes", n);
  if (n < (size_t{1} << 20)) return fmt::format("{:.1f} KiB", n / 1024.0);
  return fmt::format("{:.1f} MiB", n / double(1 << 20));
}

bool parse_int64(const std::string& s, int64_t& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return !s.empty() && ec == std::errc() && p == end;
}

size_t RequestParser::arg_limit(size_t index) const {
  switch (current_.op) {
    case StoreOp::Set: return index == 1 ? limits_.max_value_bytes : limits_.max_key_bytes;
    case StoreOp::Add: return index == 1 ? kMaxNumberChars : limits_.max_key_bytes;
    case StoreOp::Get:
    case StoreOp::Wait: return index == 0 ? kMaxNumberChars : limits_.max_key_bytes;
    case StoreOp::Check: return limits_.max_key_bytes;
  }
  return 0;
}

void RequestParser::begin_arg() {
  if (current_.args.size() == count_) {
    ready_ = true;
    stage_ = Stage::Op;
  } else {
    stage_ = Stage::Length;
  }
  head_have_ = 0;
}

size_t RequestParser::feed(const char* p, size_t n) {
  size_t used = 0;
  while (used < n && !ready_) {
    switch (stage_) {
      case Stage::Op: {
        const uint8_t op = static_cast<uint8_t>(p[used++]);
        DPLAB_CHECK(op >= 1 && op <= 5,
                    "unknown operation {} (expected 1..5: set, get, add, "
                    "wait, check)",
                    op);
        current_ = Request{static_cast<StoreOp>(op), {}};
        request_bytes_ = 5;
        stage_ = Stage::Count;
        head_have_ = 0;
        break;
      }
      case Stage::Count:
      case Stage::Length: {
        const size_t take = std::min(n - used, 4 - head_have_);
        std::memcpy(head_ + head_have_, p + used, take);
        head_have_ += take;
        used += take;
        if (head_have_ < 4) break;
        const uint32_t v = get_u32(head_);
        const char* op = op_name(current_.op);
        if (stage_ == Stage::Count) {
          const bool pair = current_.op == StoreOp::Set || current_.op == StoreOp::Add ||
                            current_.op == StoreOp::Get;
          DPLAB_CHECK(
              pair ? v == 2 : (v <= limits_.max_args && (current_.op == StoreOp::Check || v >= 1)),
              "{} with {} arguments (expected {})", op, v,
              pair ? std::string("2")
                   : fmt::format("{} to {}", current_.op == StoreOp::Check ? 0 : 1,
                                 limits_.max_args));
          count_ = v;
          current_.args.reserve(std::min<uint32_t>(v, 64));
          begin_arg();
        } else {
          const size_t index = current_.args.size();
          DPLAB_CHECK(v <= arg_limit(index),
                      "{}: argument {} is {}; the store takes at most {} "
                      "there ({} holds small facts, not tensors)",
                      op, index, human_bytes(v), human_bytes(arg_limit(index)),
                      index == 1 && current_.op == StoreOp::Set ? "a value" : "a key");
          request_bytes_ += 4 + size_t{v};
          DPLAB_CHECK(request_bytes_ <= limits_.max_request_bytes,
                      "{} request of more than {}; the limit is {}", op,
                      human_bytes(request_bytes_), human_bytes(limits_.max_request_bytes));
          length_ = v;
          current_.args.emplace_back();
          current_.args.back().reserve(v);
          stage_ = Stage::Bytes;
          if (length_ == 0) begin_arg();
        }
        break;
      }
      case Stage::Bytes: {
        std::string& arg = current_.args.back();
        const size_t take = std::min(n - used, length_ - arg.size());
        arg.append(p + used, take);
        used += take;
        if (arg.size() == length_) begin_arg();
        break;
      }
    }
  }
  return used;
}

Request RequestParser::take() {
  ready_ = false;
  stage_ = Stage::Op;
  return std::move(current_);
}

}  // namespace dplab::parallel::detail
