// hash_store.cpp: the in-process Store. Every write notifies all waiters; a waiter re-checks
// its keys and gives up at its deadline with a CommError listing what never arrived.
// Read next: process_group.cpp.
#include "parallel/rendezvous/hash_store.h"

#include <chrono>

#include "framework/error.h"

namespace dplab::parallel {

bool HashStore::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!values_.count(k)) return false;
  return true;
}

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::string HashStore::get(const std::string& key) {
  wait({key});
  std::lock_guard<std::mutex> lock(mu_);
  return values_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t now = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    int64_t old = 0;
    if (it != values_.end()) {
      try {
        old = std::stoll(it->second);
      } catch (const std::exception&) {
        DPLAB_FAIL("HashStore::add: key '{}' holds '{}', expected an integer", key, it->second);
      }
    }
    now = old + delta;
    values_[key] = std::to_string(now);
  }
  changed_.notify_all();
  return now;
}

void HashStore::wait(const std::vector<std::string>& keys) {
  std::unique_lock<std::mutex> lock(mu_);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
  if (changed_.wait_until(lock, deadline, [&] { return has_all(keys); })) return;
  std::string missing;
  for (const auto& k : keys)
    if (!values_.count(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
  throw CommError(fmt::format("HashStore: timed out after {:.1f} s waiting for keys {}",
                              timeout_.count(), missing));
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return has_all(keys);
}

}  // namespace dplab::parallel
