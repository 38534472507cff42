// store_table.cpp: the store's keys, values and parked requests (see store_table.h).
// Cost: O(log #keys) per set/get/add, O(#parked x keys) per settle; rendezvous parks at
// most a few requests per rank.
// Read next: tcp_store_server.cpp.
#include "parallel/rendezvous/store_table.h"

#include <algorithm>

#include "framework/error.h"

namespace dplab::parallel::detail {

std::string encode_reply(bool ok, const std::string& body) {
  std::string out(1, ok ? '\0' : '\1');
  put_u32(out, static_cast<uint32_t>(body.size()));
  out += body;
  return out;
}

std::optional<std::string> StoreTable::handle(Owner owner, const Request& r) {
  switch (r.op) {
    case StoreOp::Set: put(r.args[0], r.args[1]); return encode_reply(true, "");
    case StoreOp::Add: {
      int64_t delta = 0, cur = 0;
      DPLAB_CHECK(parse_int64(r.args[1], delta), "add('{}'): the delta '{}' is not an integer",
                  r.args[0], r.args[1]);
      if (auto it = data_.find(r.args[0]); it != data_.end()) {
        DPLAB_CHECK(parse_int64(it->second, cur), "add('{}'): the key holds '{}', not an integer",
                    r.args[0], it->second.substr(0, 64));
      }
      DPLAB_CHECK(!__builtin_add_overflow(cur, delta, &cur), "add('{}'): {} + {} overflows int64",
                  r.args[0], cur, delta);
      put(r.args[0], std::to_string(cur));
      return encode_reply(true, std::to_string(cur));
    }
    case StoreOp::Check: return encode_reply(true, all_exist(r.args) ? "1" : "0");
    case StoreOp::Get:
    case StoreOp::Wait: {
      int64_t ms = 0;
      DPLAB_CHECK(parse_int64(r.args[0], ms) && ms >= 0,
                  "{}: the timeout '{}' is not a number of "
                  "milliseconds >= 0",
                  op_name(r.op), r.args[0]);
      ms = std::min<int64_t>(ms, int64_t{1} << 40);  // ~35 years: far enough, no overflow
      std::vector<std::string> keys(r.args.begin() + 1, r.args.end());
      if (all_exist(keys)) return answer(r.op, keys);
      parked_.push_back({owner, r.op, std::move(keys), Clock::now() + std::chrono::milliseconds(ms),
                         ms / 1000.0});
      return std::nullopt;
    }
  }
  DPLAB_FAIL("unknown operation");
}

std::vector<std::pair<StoreTable::Owner, std::string>> StoreTable::settle(Clock::time_point now) {
  std::vector<std::pair<Owner, std::string>> out;
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (all_exist(it->keys)) {
      out.emplace_back(it->owner, answer(it->op, it->keys));
    } else if (now >= it->deadline) {
      std::string missing;
      for (const auto& k : it->keys)
        if (!data_.count(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
      out.emplace_back(
          it->owner,
          encode_reply(false, fmt::format("{} timed out after {:.1f} s; still missing: {}",
                                          op_name(it->op), it->timeout_s, missing)));
    } else {
      ++it;
      continue;
    }
    it = parked_.erase(it);
  }
  return out;
}

std::optional<StoreTable::Clock::time_point> StoreTable::next_deadline() const {
  std::optional<Clock::time_point> t;
  for (const auto& p : parked_) t = t ? std::min(*t, p.deadline) : p.deadline;
  return t;
}

void StoreTable::forget(Owner owner) {
  std::erase_if(parked_, [owner](const Parked& p) { return p.owner == owner; });
}

void StoreTable::put(const std::string& key, const std::string& value) {
  auto it = data_.find(key);
  const size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t total = total_bytes_ - old + key.size() + value.size();
  DPLAB_CHECK(total <= limits_.max_total_bytes,
              "set('{}'): the store would hold {}, over its "
              "limit of {} (it holds small facts, not tensors)",
              key.substr(0, 64), human_bytes(total), human_bytes(limits_.max_total_bytes));
  data_[key] = value;
  total_bytes_ = total;
}

bool StoreTable::all_exist(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(),
                     [&](const std::string& k) { return data_.count(k) > 0; });
}

std::string StoreTable::answer(StoreOp op, const std::vector<std::string>& keys) const {
  return encode_reply(true, op == StoreOp::Get ? data_.at(keys.front()) : "");
}

}  // namespace dplab::parallel::detail
