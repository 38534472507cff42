// shm_transport.cpp: create, share and map the block; the protocol itself is
// mailbox_transport.cpp. The mapping is released by the transport's owner pointer (munmap).
// Read next: thread_transport.cpp.
#include "parallel/transport/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "framework/error.h"
#include "parallel/transport/mailbox_transport.h"

namespace dplab::parallel {
namespace {

// Unmaps on destruction, and closes rank 0's descriptor if it is still open (an exception
// during rendezvous): the kernel frees the memory with the last mapping and descriptor.
struct ShmMapping {
  void* addr = MAP_FAILED;
  std::size_t bytes = 0;
  int fd = -1;  // rank 0 holds its memfd open until every rank has mapped the block
  ~ShmMapping() {
    if (addr != MAP_FAILED) munmap(addr, bytes);
    if (fd >= 0) close(fd);
  }
};

void* map_fd(int fd, std::size_t bytes, const std::string& what, int rank) {
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED)
    throw CommError(fmt::format("rank {}: mmap of the shared block {} ({} bytes) failed: {}",
                                rank, what, bytes, std::strerror(errno)));
  return addr;
}

// Rank 0: an anonymous file of `bytes` zeros that no directory names.
int create_block(std::size_t bytes) {
  int fd = memfd_create("dplab-mailbox", MFD_CLOEXEC);
  if (fd < 0)
    throw CommError(fmt::format("rank 0: memfd_create failed: {}", std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    throw CommError(fmt::format("rank 0: sizing the shared block to {} bytes failed: {} (is "
                                "memory short?)", bytes, std::strerror(err)));
  }
  return fd;
}

// Any other rank: open rank 0's descriptor through /proc (same user, same machine).
int open_block(const std::string& path, int rank) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    throw CommError(fmt::format("rank {}: opening rank 0's shared block {} failed: {} (the "
                                "shm backend needs every rank on one machine, as one user)",
                                rank, path, std::strerror(errno)));
  return fd;
}

}  // namespace

std::unique_ptr<MailboxTransport> make_shm_mailbox(Store& store, const std::string& key_prefix,
                                                   int rank, int size, std::size_t bytes,
                                                   const MakeMailbox& make) {
  auto mapping = std::make_shared<ShmMapping>();
  mapping->bytes = bytes;
  const std::string path_key = key_prefix + "/shm_path";
  if (rank == 0) {
    mapping->fd = create_block(bytes);
    mapping->addr = map_fd(mapping->fd, bytes, "(memfd)", rank);  // zero-filled
  } else {
    std::string path = store.get(path_key);
    int fd = open_block(path, rank);
    mapping->addr = map_fd(fd, bytes, path, rank);
    close(fd);  // the mapping keeps the block alive
  }
  std::unique_ptr<MailboxTransport> transport = make(mapping, mapping->addr);
  transport->status(rank).pid = static_cast<int32_t>(getpid());
  if (rank == 0) {
    store.set(path_key, fmt::format("/proc/{}/fd/{}", getpid(), mapping->fd));
    std::vector<std::string> keys;
    for (int r = 1; r < size; ++r) keys.push_back(fmt::format("{}/mapped/{}", key_prefix, r));
    store.wait(keys);
    // every rank maps it now: the descriptor is no longer needed
    close(mapping->fd);
    mapping->fd = -1;
    store.set(key_prefix + "/shm_ready", "1");
  } else {
    store.set(fmt::format("{}/mapped/{}", key_prefix, rank), "1");
    store.get(key_prefix + "/shm_ready");  // all pids are in the block from here on
  }
  return transport;
}

std::unique_ptr<Transport> make_shm_transport(Store& store, const std::string& key_prefix,
                                              int rank, int size, Seconds timeout,
                                              std::size_t slot_bytes) {
  return make_shm_mailbox(store, key_prefix, rank, size, mailbox_bytes(size, slot_bytes),
                          [&](std::shared_ptr<void> owner, void* memory) {
                            return std::make_unique<MailboxTransport>(owner, memory, rank, size,
                                                                      timeout, "shm", slot_bytes);
                          });
}

}  // namespace dplab::parallel
