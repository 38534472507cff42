// store_wire.h: the TCP store's wire format, its limits, and the incremental request parser
// the server runs on bytes from clients it does not trust.
// A connection opens with the handshake (job_token.h): the server sends kHello and its nonce,
// the client answers with its nonce and proof, the server answers [status:u8] and, on
// success, its own proof (on refusal, [len:u32][why]). Then requests: [op:u8][n:u32] and n
// strings, each [len:u32][bytes]; integers travel as decimal strings. A reply is
// [status:u8][len:u32][bytes]: status 0 = ok (the value), 1 = error (why).
// Nothing a client sends is trusted: every length is checked against StoreLimits before a
// byte of it is buffered, and the parser keeps its place, so a request that arrives one byte
// at a time costs O(its size) in all, not O(size^2).
// Read next: tcp_store_server.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dplab::parallel {

// What one store server accepts. The defaults fit rendezvous facts (addresses, handles,
// small strings): a store is not a place for tensors.
struct StoreLimits {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{1} << 20;   // 1 MiB
  size_t max_total_bytes = size_t{64} << 20;  // keys + values held at once
  uint32_t max_args = 1u << 16;               // keys in one wait/check
  size_t max_request_bytes = size_t{4} << 20;
  // Connections that have not proved the token yet. While this many wait, a newcomer is
  // closed at once (a rank's client tries again): a crowd of strangers holds at most this
  // many descriptors, each for at most handshake_seconds, and none of them can push out a
  // rank that is halfway through proving itself.
  size_t max_pending = 32;
  double handshake_seconds = 10.0;  // a pending connection has this long to prove it
  // Connections that proved it (0: half of RLIMIT_NOFILE's soft limit, so the process that
  // hosts the store keeps descriptors for its own files).
  size_t max_clients = 0;
};

namespace detail {

enum class StoreOp : uint8_t { Set = 1, Get = 2, Add = 3, Wait = 4, Check = 5 };
const char* op_name(StoreOp op);

inline constexpr char kHello[] = "DPLAB-STORE/2";  // sent without its '\0'
inline constexpr size_t kHelloBytes = sizeof(kHello) - 1;

std::string encode_request(StoreOp op, const std::vector<std::string>& args);
void put_u32(std::string& out, uint32_t v);
uint32_t get_u32(const char* p);
// "5 bytes", "1.5 MiB": sizes in messages.
std::string human_bytes(size_t n);
// A decimal int64 with nothing else around it, or false.
bool parse_int64(const std::string& s, int64_t& out);

struct Request {
  StoreOp op;
  std::vector<std::string> args;
};

// Turns a byte stream into requests without re-reading what it has seen. A malformed or
// oversized request throws Error whose message says what was expected; the connection is
// then dropped (its remaining bytes cannot be framed).
class RequestParser {
 public:
  explicit RequestParser(const StoreLimits& limits) : limits_(limits) {}
  // Consumes up to n bytes; returns how many it used. Stops after one complete request
  // (then ready() is true and take() hands it over), so the caller serves requests one at
  // a time and keeps the rest of its input for later.
  size_t feed(const char* p, size_t n);
  bool ready() const { return ready_; }
  Request take();

 private:
  void begin_arg();
  size_t arg_limit(size_t index) const;  // the longest this argument of this op may be
  enum class Stage { Op, Count, Length, Bytes };
  const StoreLimits& limits_;
  Stage stage_ = Stage::Op;
  char head_[4] = {};
  size_t head_have_ = 0;
  uint32_t count_ = 0;
  uint32_t length_ = 0;
  size_t request_bytes_ = 0;
  Request current_{StoreOp::Set, {}};
  bool ready_ = false;
};

}  // namespace detail
}  // namespace dplab::parallel
