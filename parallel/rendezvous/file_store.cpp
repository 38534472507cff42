// file_store.cpp: FileStore. The file is a log of records [klen:u32][key][vlen:u32][value];
// the last record for a key wins. Writers hold LOCK_EX while appending, readers LOCK_SH while
// reading, so a reader never sees half a record. add() is read-modify-append under one
// LOCK_EX, hence atomic across processes.
// Read next: rendezvous.cpp.
#include "parallel/rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "framework/error.h"

namespace dplab::parallel {

namespace {

constexpr const char* kDoneKey = "__filestore/done";  // how many stores have been destroyed

// Holds a flock for one scope.
class FileLock {
 public:
  FileLock(int fd, int op) : fd_(fd) {
    while (::flock(fd_, op) != 0) {
      DPLAB_CHECK(errno == EINTR, "FileStore: flock failed: {}", std::strerror(errno));
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

FileStore::FileStore(std::string path, int world_size, Seconds timeout)
    : path_(std::move(path)), world_size_(world_size) {
  timeout_ = timeout;
  DPLAB_CHECK(!path_.empty(), "FileStore: empty path (init_method should be file:///some/path)");
  // O_NOFOLLOW: a link planted at the path (in /tmp, by anyone) must not make us append to
  // the file it points at. 0600: only this user reads or writes the job's keys.
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  DPLAB_CHECK(fd_ >= 0, "FileStore: cannot open '{}': {}{}", path_, std::strerror(errno),
              errno == ELOOP ? " (it is a symbolic link; the store takes a plain file only)" : "");
  // A file someone else made, or may write, could hold forged keys: refuse it.
  struct stat st {};
  const bool ok = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
                  (st.st_mode & 022) == 0;
  if (!ok) {
    ::close(fd_);
    fd_ = -1;
    DPLAB_FAIL("FileStore: '{}' is not a plain file of this user's that only this user may write "
               "(uid {}, mode {:o}); another user could forge the job's keys there: remove it or "
               "pick another path",
               path_, st.st_uid, st.st_mode & 07777);
  }
}

FileStore::~FileStore() {
  if (fd_ < 0) return;
  try {
    if (world_size_ > 0) {
      std::lock_guard<std::mutex> g(mu_);
      FileLock lock(fd_, LOCK_EX);
      refresh_locked();
      int64_t done =
          cache_.count(kDoneKey) ? std::strtoll(cache_[kDoneKey].c_str(), nullptr, 10) : 0;
      append_locked(kDoneKey, std::to_string(done + 1));
      // The last rank out removes the file, so the next run starts from an empty store.
      if (done + 1 >= world_size_) ::unlink(path_.c_str());
    }
  } catch (const std::exception&) {
    // A destructor must not throw; the file then stays behind, which the header documents.
  }
  ::close(fd_);
}

void FileStore::refresh_locked() {
  struct stat st {};
  DPLAB_CHECK(::fstat(fd_, &st) == 0, "FileStore: fstat('{}') failed: {}", path_,
              std::strerror(errno));
  if (st.st_size < offset_) {
    // Someone deleted and recreated the file under us; it cannot be the same store.
    DPLAB_FAIL("FileStore: '{}' shrank from {} to {} bytes while in use", path_, offset_,
               static_cast<int64_t>(st.st_size));
  }
  if (st.st_size == offset_) return;
  std::string buf(static_cast<size_t>(st.st_size - offset_), '\0');
  ssize_t got = ::pread(fd_, buf.data(), buf.size(), offset_);
  DPLAB_CHECK(got == static_cast<ssize_t>(buf.size()), "FileStore: short read of '{}'", path_);
  size_t pos = 0;
  auto take_u32 = [&](uint32_t& v) {
    if (pos + 4 > buf.size()) return false;
    std::memcpy(&v, buf.data() + pos, 4);
    pos += 4;
    return true;
  };
  while (pos < buf.size()) {
    uint32_t klen = 0, vlen = 0;
    size_t start = pos;
    DPLAB_CHECK(take_u32(klen) && pos + klen <= buf.size(), "FileStore: '{}' is corrupt at byte {}",
                path_, offset_ + static_cast<int64_t>(start));
    std::string key(buf, pos, klen);
    pos += klen;
    DPLAB_CHECK(take_u32(vlen) && pos + vlen <= buf.size(), "FileStore: '{}' is corrupt at byte {}",
                path_, offset_ + static_cast<int64_t>(start));
    cache_[key] = std::string(buf, pos, vlen);
    pos += vlen;
  }
  offset_ = st.st_size;
}

void FileStore::append_locked(const std::string& key, const std::string& value) {
  std::string rec;
  put_u32(rec, static_cast<uint32_t>(key.size()));
  rec += key;
  put_u32(rec, static_cast<uint32_t>(value.size()));
  rec += value;
  size_t off = 0;
  while (off < rec.size()) {
    ssize_t n = ::write(fd_, rec.data() + off, rec.size() - off);
    if (n < 0 && errno == EINTR) continue;
    DPLAB_CHECK(n > 0, "FileStore: write to '{}' failed: {}", path_, std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  // Our own record is now known; skip re-parsing it on the next refresh.
  refresh_locked();
}

void FileStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> g(mu_);
  FileLock lock(fd_, LOCK_EX);
  refresh_locked();
  append_locked(key, value);
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> g(mu_);
  FileLock lock(fd_, LOCK_EX);
  refresh_locked();
  int64_t cur = 0;
  if (auto it = cache_.find(key); it != cache_.end()) {
    try {
      cur = std::stoll(it->second);
    } catch (const std::exception&) {
      DPLAB_FAIL("FileStore: add('{}'): the key holds '{}', not an integer", key, it->second);
    }
  }
  cur += delta;
  append_locked(key, std::to_string(cur));
  return cur;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> g(mu_);
  FileLock lock(fd_, LOCK_SH);
  refresh_locked();
  for (const auto& k : keys)
    if (!cache_.count(k)) return false;
  return true;
}

void FileStore::wait_for(const std::vector<std::string>& keys, const char* op) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
  auto pause = std::chrono::milliseconds(10);
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      std::lock_guard<std::mutex> g(mu_);
      std::string missing;
      for (const auto& k : keys)
        if (!cache_.count(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
      throw CommError(fmt::format("FileStore '{}': {} timed out after {:.1f} s; still missing: {}",
                                  path_, op, timeout_.count(), missing));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::string FileStore::get(const std::string& key) {
  wait_for({key}, "get");
  std::lock_guard<std::mutex> g(mu_);
  return cache_.at(key);
}

void FileStore::wait(const std::vector<std::string>& keys) { wait_for(keys, "wait"); }

}  // namespace dplab::parallel
