// file_store.h: a rendezvous store in one shared file (torch.distributed.FileStore), for
// single-node runs with init_method "file:///path". Every write appends a record under an
// exclusive flock; readers take a shared flock and re-read only the bytes appended since
// their last look, so no server process is needed. Waits poll the file (10 -> 50 ms).
// The file is deleted when the last of the world_size stores using it is destroyed; a file
// left behind by a crashed run must be removed by hand (its old keys would look valid).
// Read next: file_store.cpp, rendezvous.h.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

class FileStore : public Store {
 public:
  // world_size: how many ranks share the file (they each construct one FileStore);
  // -1 means "never delete the file".
  FileStore(std::string path, int world_size = -1, Seconds timeout = kDefaultTimeout);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;

  const std::string& path() const { return path_; }

 private:
  // Reads records appended since offset_ into cache_. Caller holds a flock.
  void refresh_locked();
  void append_locked(const std::string& key, const std::string& value);
  // Polls until every key is in the file; throws CommError naming the missing ones.
  void wait_for(const std::vector<std::string>& keys, const char* op);

  std::string path_;
  int world_size_;
  int fd_ = -1;
  int64_t offset_ = 0;  // bytes of the file already parsed into cache_
  std::map<std::string, std::string> cache_;
  std::mutex mu_;  // threads of one process share offset_ and cache_
};

}  // namespace dplab::parallel
