// shm_transport.cpp: create, name, map and unlink the segment; the protocol itself is
// mailbox_transport.cpp. The mapping is released by the transport's owner pointer (munmap).
// Read next: thread_transport.cpp.
#include "parallel/transport/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "framework/error.h"
#include "parallel/transport/mailbox_transport.h"

namespace dplab::parallel {
namespace {

// Unmaps on destruction; unlinks too if the name was never unlinked (an exception during
// rendezvous), so a failed start leaves nothing behind.
struct ShmMapping {
  void* addr = MAP_FAILED;
  std::size_t bytes = 0;
  std::string name;  // non-empty while this process still has to shm_unlink it
  ~ShmMapping() {
    if (addr != MAP_FAILED) munmap(addr, bytes);
    if (!name.empty()) shm_unlink(name.c_str());
  }
};

std::string random_name() {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("/dplab-{}-{:016x}", getpid(), r);
}

void* map_fd(int fd, std::size_t bytes, const std::string& name, int rank) {
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (addr == MAP_FAILED)
    throw CommError(fmt::format("rank {}: mmap of shm segment {} ({} bytes) failed: {}", rank,
                                name, bytes, std::strerror(err)));
  return addr;
}

}  // namespace

std::unique_ptr<MailboxTransport> make_shm_mailbox(Store& store, const std::string& key_prefix,
                                                   int rank, int size, std::size_t bytes,
                                                   const MakeMailbox& make) {
  auto mapping = std::make_shared<ShmMapping>();
  mapping->bytes = bytes;
  const std::string name_key = key_prefix + "/shm_name";
  if (rank == 0) {
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
      mapping->name = random_name();
      fd = shm_open(mapping->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 && errno == EEXIST) shm_unlink(mapping->name.c_str());  // stale: retry
    }
    if (fd < 0)
      throw CommError(fmt::format("rank 0: shm_open({}) failed: {}", mapping->name,
                                  std::strerror(errno)));
    if (ftruncate(fd, static_cast<off_t>(mapping->bytes)) != 0) {
      int err = errno;
      close(fd);
      throw CommError(fmt::format("rank 0: ftruncate of shm segment {} to {} bytes failed: {} "
                                  "(is /dev/shm full?)", mapping->name, mapping->bytes,
                                  std::strerror(err)));
    }
    mapping->addr = map_fd(fd, mapping->bytes, mapping->name, rank);  // zero-filled
  } else {
    std::string name = store.get(name_key);
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0)
      throw CommError(fmt::format("rank {}: shm_open({}) of rank 0's segment failed: {}", rank,
                                  name, std::strerror(errno)));
    mapping->addr = map_fd(fd, mapping->bytes, name, rank);
  }
  std::unique_ptr<MailboxTransport> transport = make(mapping, mapping->addr);
  transport->status(rank).pid = static_cast<int32_t>(getpid());
  if (rank == 0) {
    store.set(name_key, mapping->name);
    std::vector<std::string> keys;
    for (int r = 1; r < size; ++r) keys.push_back(fmt::format("{}/mapped/{}", key_prefix, r));
    store.wait(keys);
    // every rank maps it now: the name is no longer needed, and unlinking it here means a
    // crash from now on leaves nothing in /dev/shm
    shm_unlink(mapping->name.c_str());
    mapping->name.clear();
    store.set(key_prefix + "/shm_ready", "1");
  } else {
    store.set(fmt::format("{}/mapped/{}", key_prefix, rank), "1");
    store.get(key_prefix + "/shm_ready");  // all pids are in the segment from here on
  }
  return transport;
}

std::unique_ptr<Transport> make_shm_transport(Store& store, const std::string& key_prefix,
                                              int rank, int size, Seconds timeout) {
  return make_shm_mailbox(store, key_prefix, rank, size, mailbox_bytes(size),
                          [&](std::shared_ptr<void> owner, void* memory) {
                            return std::make_unique<MailboxTransport>(owner, memory, rank, size,
                                                                      timeout, "shm");
                          });
}

}  // namespace dplab::parallel
