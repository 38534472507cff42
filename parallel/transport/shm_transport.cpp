// shm_transport.cpp: create, share and map the block; the protocol itself is
// mailbox_transport.cpp. The mapping is released by the transport's owner pointer (munmap).
// A rank maps only what rank 0 created: the store carries rank 0's pid, descriptor number,
// the file's device and inode and the machine's boot id, never a path; the rank checks
// owner, type, size, inode, name and seals before it opens or maps anything.
// Read next: thread_transport.cpp.
#include "parallel/transport/shm_transport.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

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

constexpr const char* kBlockName = "dplab-mailbox";
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

void* map_fd(int fd, std::size_t bytes, const std::string& what, int rank) {
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED)
    throw CommError(fmt::format("rank {}: mmap of the shared block {} ({} bytes) failed: {}", rank,
                                what, bytes, std::strerror(errno)));
  return addr;
}

// Rank 0: an anonymous file of `bytes` zeros that no directory names, sealed at that size
// (no rank can shrink it under another's mapping: no SIGBUS), which only a memfd can be.
int create_block(std::size_t bytes) {
  int fd = memfd_create(kBlockName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw CommError(fmt::format("rank 0: memfd_create failed: {}", std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, kSeals & ~F_SEAL_SEAL) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) != 0) {
    int err = errno;
    close(fd);
    throw CommError(fmt::format("rank 0: sizing and sealing the shared block ({} bytes) failed: "
                                "{} (is memory short?)",
                                bytes, std::strerror(err)));
  }
  return fd;
}

// What rank 0 publishes: where its descriptor is and which file it is. Never a path: the
// other ranks build "/proc/<pid>/fd/<fd>" themselves and check what they find there.
struct BlockId {
  int64_t pid = 0, fd = -1;
  uint64_t dev = 0, ino = 0;
  std::string boot;  // this boot of this machine (/proc/sys/kernel/random/boot_id)
};

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id.substr(0, 64);
}

std::string encode(const BlockId& b) {
  return fmt::format("{} {} {} {} {}", b.pid, b.fd, b.dev, b.ino, b.boot);
}

BlockId decode(const std::string& s, int rank) {
  BlockId b;
  std::istringstream in(s.substr(0, 256));
  bool ok = static_cast<bool>(in >> b.pid >> b.fd >> b.dev >> b.ino >> b.boot);
  if (!ok || b.pid <= 0 || b.pid > (int64_t{1} << 31) || b.fd < 0 || b.fd > (int64_t{1} << 31))
    throw CommError(fmt::format("rank {}: the store's shared-block record is malformed "
                                "(expected \"pid fd dev inode boot_id\"); refusing to open "
                                "anything",
                                rank));
  return b;
}

[[noreturn]] void refuse(int rank, const BlockId& b, const std::string& why) {
  throw CommError(fmt::format("rank {}: the shared block named in the store (pid {}, fd {}) is "
                              "not rank 0's: {}; refusing to map it (a stranger may have written "
                              "the store's key)",
                              rank, b.pid, b.fd, why));
}

// Any other rank: open rank 0's descriptor through /proc, only after checking that it is the
// sealed memfd of the size and inode rank 0 published, owned by this user.
int open_block(const BlockId& b, std::size_t bytes, int rank) {
  const std::string path = fmt::format("/proc/{}/fd/{}", b.pid, b.fd);
  if (b.boot != boot_id()) {
    throw CommError(fmt::format("rank {}: rank 0 runs on another machine (or an earlier boot): "
                                "the shm transport needs every rank on one machine; across "
                                "machines use the mpi or nccl engine",
                                rank));
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (kill(static_cast<pid_t>(b.pid), 0) != 0 && errno == ESRCH)
      throw CommError(fmt::format("rank {}: rank 0 (pid {}) has exited before this rank could map "
                                  "its shared block; rank 0's own error says why",
                                  rank, b.pid));
    if (err == ENOENT)
      throw CommError(fmt::format("rank {}: rank 0 (pid {}) closed its shared block before this "
                                  "rank mapped it: rank 0 gave up waiting (see its error; on a "
                                  "loaded machine raise DPLAB_TIMEOUT)",
                                  rank, b.pid));
    throw CommError(fmt::format("rank {}: cannot reach rank 0's shared block ({}): {} (the shm "
                                "transport needs every rank on one machine, as one user)",
                                rank, path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) refuse(rank, b, "it is not a regular file");
  if (st.st_uid != geteuid())
    refuse(rank, b, fmt::format("it belongs to uid {}, not to this user", st.st_uid));
  if (st.st_dev != b.dev || st.st_ino != b.ino)
    refuse(rank, b, "its inode is not the one published");
  if (static_cast<std::size_t>(st.st_size) != bytes)
    refuse(rank, b, fmt::format("it holds {} bytes, not {}", st.st_size, bytes));
  char target[64] = {};
  const std::string expected = std::string("/memfd:") + kBlockName;
  if (readlink(path.c_str(), target, sizeof(target) - 1) < 0 ||
      std::string(target).rfind(expected, 0) != 0)
    refuse(rank, b, "it is not a memfd of dplab's");
  // (/proc's fd links must be followed, so no O_NOFOLLOW; the file was checked above and is
  // checked again below, through the descriptor)
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    throw CommError(fmt::format("rank {}: opening rank 0's shared block (pid {}, fd {}) failed: {}",
                                rank, b.pid, b.fd, std::strerror(errno)));
  // The same file as checked, and sealed at its size as rank 0 sealed it (only a memfd can be).
  struct stat again {};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &again) != 0 || again.st_dev != b.dev || again.st_ino != b.ino || seals != kSeals) {
    close(fd);
    refuse(rank, b, "it changed while being opened, or is not sealed as rank 0 seals its block");
  }
  return fd;
}

}  // namespace

std::unique_ptr<MailboxTransport> make_shm_mailbox(Store& store, int rank, int size,
                                                   std::size_t bytes, const MakeMailbox& make) {
  auto mapping = std::make_shared<ShmMapping>();
  mapping->bytes = bytes;
  const std::string block_key = "shm_block";
  BlockId id;
  if (rank == 0) {
    mapping->fd = create_block(bytes);
    mapping->addr = map_fd(mapping->fd, bytes, "(memfd)", rank);  // zero-filled
    struct stat st {};
    fstat(mapping->fd, &st);
    id = BlockId{getpid(), mapping->fd, st.st_dev, st.st_ino, boot_id()};
  } else {
    id = decode(store.get(block_key), rank);
    int fd = open_block(id, bytes, rank);
    mapping->addr = map_fd(fd, bytes, "of rank 0", rank);
    close(fd);  // the mapping keeps the block alive
  }
  std::unique_ptr<MailboxTransport> transport = make(mapping, mapping->addr);
  transport->status(rank).pid = static_cast<int32_t>(getpid());
  if (rank == 0) {
    store.set(block_key, encode(id));
    std::vector<std::string> keys;
    for (int r = 1; r < size; ++r) keys.push_back(fmt::format("mapped/{}", r));
    store.wait(keys);
    // every rank maps it now: the descriptor is no longer needed
    close(mapping->fd);
    mapping->fd = -1;
    store.set("shm_ready", "1");
  } else {
    store.set(fmt::format("mapped/{}", rank), "1");
    store.get("shm_ready");  // all pids are in the block from here on
  }
  return transport;
}

std::unique_ptr<Transport> make_shm_transport(Store& store, int rank, int size, Seconds timeout,
                                              std::size_t slot_bytes) {
  return make_shm_mailbox(store, rank, size, mailbox_bytes(size, slot_bytes),
                          [&](std::shared_ptr<void> owner, void* memory) {
    return std::make_unique<MailboxTransport>(owner, memory, rank, size, timeout, "shm",
                                              slot_bytes);
  });
}

}  // namespace dplab::parallel
