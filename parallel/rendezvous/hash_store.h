// hash_store.h: an in-process Store (torch.distributed.HashStore) for ranks-as-threads.
// A map under a mutex, with a condition variable so get / wait block until a key appears
// (or the timeout passes, which throws CommError naming the missing keys).
// The engine factory (engines/make_engine.cpp) sees a HashStore and picks the thread
// transport: all ranks are threads of this process, so their mailboxes can live on the heap.
// Read next: process_group.h, transport/thread_transport.h.
#pragma once
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

class HashStore : public Store {
 public:
  explicit HashStore(Seconds timeout = kDefaultTimeout) { timeout_ = timeout; }

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;

 private:
  bool has_all(const std::vector<std::string>& keys) const;  // mu_ held

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace dplab::parallel
