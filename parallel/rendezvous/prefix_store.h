// prefix_store.h: a view of a store whose keys all begin with one prefix (gloo's and
// torch.distributed's PrefixStore). A process group, a transport or a watchdog takes a
// PrefixStore("dplab/pg3", store) and names its keys plainly ("shm_block", "mapped/1"): two
// groups on one store can then never read each other's keys, and no code builds key
// prefixes by hand. The prefix and the key are joined with '/'.
// Read next: store.h, tcp_store.h.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

class PrefixStore : public Store {
 public:
  // The view shares `base` (and its timeout: set_timeout on the view changes the base's).
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;

  const std::string& prefix() const { return prefix_; }
  Store& base() const { return *base_; }
  // "prefix/key": the key as the base store sees it.
  std::string full_key(const std::string& key) const { return prefix_ + "/" + key; }

 private:
  std::vector<std::string> full_keys(const std::vector<std::string>& keys) const;
  void sync_timeout();  // the base's timeout follows this view's

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace dplab::parallel
