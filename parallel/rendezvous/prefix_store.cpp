// prefix_store.cpp: every call forwards to the base store with "prefix/" before each key.
// Read next: tcp_store.cpp.
#include "parallel/rendezvous/prefix_store.h"

#include "framework/error.h"

namespace dplab::parallel {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  DPLAB_CHECK(base_ != nullptr, "PrefixStore('{}'): the base store is null", prefix_);
  DPLAB_CHECK(!prefix_.empty(), "PrefixStore: the prefix is empty (a view without one would "
                                "share every key of its base)");
  timeout_ = base_->timeout();
}

void PrefixStore::sync_timeout() { base_->set_timeout(timeout_); }

std::vector<std::string> PrefixStore::full_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full_key(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  sync_timeout();
  base_->set(full_key(key), value);
}

std::string PrefixStore::get(const std::string& key) {
  sync_timeout();
  return base_->get(full_key(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  sync_timeout();
  return base_->add(full_key(key), delta);
}

void PrefixStore::wait(const std::vector<std::string>& keys) {
  sync_timeout();
  base_->wait(full_keys(keys));
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  sync_timeout();
  return base_->check(full_keys(keys));
}

}  // namespace dplab::parallel
