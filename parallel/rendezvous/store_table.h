// store_table.h: what the TCP store holds (internal header): the keys and values with their
// byte count under StoreLimits' total, and the get/wait requests parked until their keys
// appear or their deadline passes. No sockets here: the server (tcp_store_server.cpp) feeds
// it parsed requests and sends the replies it returns.
// Read next: store_table.cpp, tcp_store_server.cpp.
#pragma once
#include <chrono>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/rendezvous/store_wire.h"

namespace dplab::parallel::detail {

// [status:u8][len:u32][body]: status 0 = ok (the value), 1 = error (why).
std::string encode_reply(bool ok, const std::string& body);

class StoreTable {
 public:
  using Clock = std::chrono::steady_clock;
  using Owner = void*;  // the connection a parked request belongs to

  explicit StoreTable(const StoreLimits& limits) : limits_(limits) {}

  // The reply to r, or nullopt when r (a get/wait on missing keys) was parked for `owner`.
  // Throws Error for a request the store refuses (an add on a non-integer, the total
  // over its limit); the caller answers with the message.
  std::optional<std::string> handle(Owner owner, const Request& r);
  // Replies for the parked requests whose keys now exist or whose deadline has passed.
  std::vector<std::pair<Owner, std::string>> settle(Clock::time_point now);
  std::optional<Clock::time_point> next_deadline() const;
  void forget(Owner owner);  // its connection closed: drop what it parked

 private:
  struct Parked {
    Owner owner;
    StoreOp op;  // Get (answer with the value) or Wait (answer with "")
    std::vector<std::string> keys;
    Clock::time_point deadline;
    double timeout_s;
  };
  void put(const std::string& key, const std::string& value);
  bool all_exist(const std::vector<std::string>& keys) const;
  std::string answer(StoreOp op, const std::vector<std::string>& keys) const;

  const StoreLimits& limits_;
  std::map<std::string, std::string> data_;
  size_t total_bytes_ = 0;
  std::list<Parked> parked_;
};

}  // namespace dplab::parallel::detail
