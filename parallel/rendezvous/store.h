// store.h: the rendezvous key-value store (torch.distributed's Store).
// Ranks exchange small facts through it before any collective runs: "my shm segment is
// called X", "rank 3 is here". Rank 0 hosts a TCPStore on MASTER_ADDR:MASTER_PORT and the
// others connect; a FileStore serves single-node runs; a HashStore serves ranks-as-threads
// tests. Every wait ends in a CommError within its timeout, never a hang.
// Read next: process_group.h.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dplab::parallel {

using Seconds = std::chrono::duration<double>;
inline constexpr Seconds kDefaultTimeout{60.0};

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until the key exists (up to timeout), then returns its value.
  virtual std::string get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (0 if absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Waits until all keys exist; throws CommError naming the missing keys after the timeout.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;  // all exist now?

  void set_timeout(Seconds t) { timeout_ = t; }
  Seconds timeout() const { return timeout_; }

 protected:
  Seconds timeout_ = kDefaultTimeout;
};

}  // namespace dplab::parallel
