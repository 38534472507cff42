// gloo_store.cpp: the adapter's four calls. dplab's errors (CommError naming the missing
// keys after the timeout) pass through gloo unchanged, so a rank that never came is named
// the way the rest of dplab names it.
// Read next: transport/gloo_transport.cpp.
#include "parallel/rendezvous/gloo_store.h"

#include "framework/error.h"

namespace dplab::parallel {

GlooStore::GlooStore(std::shared_ptr<parallel::Store> store) : store_(std::move(store)) {
  DPLAB_CHECK(store_ != nullptr, "GlooStore: the dplab store is null");
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::string v = store_->get(key);
  return std::vector<char>(v.begin(), v.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { store_->wait(keys); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  store_->wait(keys);
}

}  // namespace dplab::parallel
