// temp_file.cpp: the temporary file, its clean-up on signals, and stale temporaries.
// The handlers are installed only while a save is under way. A signal handler may only make
// async-signal-safe calls: it unlinks paths that were copied into a fixed table beforehand
// (no allocation, no locks), then hands the signal to the program's own handler, or restores
// the default action and raises the signal again, so the process ends as it would have.
// Read next: safetensors.cpp.
#include "framework/io/temp_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "framework/error.h"

namespace dplab {
namespace {

std::string errno_str() { return std::strerror(errno); }

// Live temporaries, for the handlers. A slot is armed (2) only once its path is complete.
constexpr int kSlots = 32;
constexpr size_t kPathMax = 4096;
struct LiveSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 armed
  char path[kPathMax];
};
std::array<LiveSlot, kSlots> g_live;

constexpr std::array<int, 3> kCleanupSignals{SIGINT, SIGTERM, SIGHUP};
std::array<struct sigaction, 3> g_previous;

void on_fatal_signal(int sig) {
  for (LiveSlot& s : g_live)
    if (s.state.load() == 2) ::unlink(s.path);
  for (size_t i = 0; i < kCleanupSignals.size(); ++i) {
    if (kCleanupSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler == SIG_IGN) return;
    if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL) {
      prev.sa_handler(sig);  // the program's own handler decides what happens next
      return;
    }
    ::sigaction(sig, &prev, nullptr);  // the default action: end the process by this signal
    ::raise(sig);
  }
}

// Our handlers are in place only while some save is under way: the first live temporary
// installs them (remembering the program's own), the last one puts the program's back.
std::mutex g_install_mu;
int g_saves_in_flight = 0;

void acquire_handlers() {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (g_saves_in_flight++ > 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < kCleanupSignals.size(); ++i)
    ::sigaction(kCleanupSignals[i], &sa, &g_previous[i]);
}

void release_handlers() {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (--g_saves_in_flight > 0) return;
  for (size_t i = 0; i < kCleanupSignals.size(); ++i)
    ::sigaction(kCleanupSignals[i], &g_previous[i], nullptr);
}

int arm(const std::string& path) {
  if (path.size() >= kPathMax) return -1;  // too long to protect; the stale sweep still will
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_live[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_live[i].path, path.c_str(), path.size() + 1);
    g_live[i].state.store(2);
    return i;
  }
  return -1;  // more than kSlots saves at once: those go unprotected, not refused
}

void disarm(int slot) {
  if (slot >= 0) g_live[slot].state.store(0);
}

}  // namespace

int remove_stale_temporaries(const std::string& final_path) {
  auto slash = final_path.rfind('/');
  // always ending in '/', so dir + name is the entry's path ("./ckpt.tmp-..." for "ckpt")
  const std::string dir = slash == std::string::npos ? "./" : final_path.substr(0, slash + 1);
  const std::string prefix =
      (slash == std::string::npos ? final_path : final_path.substr(slash + 1)) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!name.starts_with(prefix)) continue;
    // "<pid>-<n>": only our own naming, and only when that process is gone
    const char* p = name.c_str() + prefix.size();
    char* end = nullptr;
    long pid = std::strtol(p, &end, 10);
    if (end == p || *end != '-' || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (::unlink((dir + name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

TempFile::TempFile(const std::string& final_path) : final_(final_path) {
  static std::atomic<uint64_t> counter{0};
  remove_stale_temporaries(final_path);
  path_ = fmt::format("{}.tmp-{}-{}", final_path, ::getpid(), counter.fetch_add(1));
  acquire_handlers();
  slot_ = arm(path_);  // before the file exists: a signal from here on removes it
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    int err = errno;
    disarm(slot_);
    release_handlers();
    DPLAB_FAIL("save_safetensors: cannot create the temporary file {}: {}", path_,
               std::strerror(err));
  }
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
  disarm(slot_);
  release_handlers();
}

// fsync so the data is on disk before the name points at it; otherwise a crash after
// rename could leave the new name on an empty or partial file.
void TempFile::commit() {
  DPLAB_CHECK(::fsync(fd_) == 0, "save_safetensors: fsync of {} failed: {}", path_, errno_str());
  int rc = ::close(fd_);
  fd_ = -1;
  DPLAB_CHECK(rc == 0, "save_safetensors: closing {} failed: {}", path_, errno_str());
  DPLAB_CHECK(::rename(path_.c_str(), final_.c_str()) == 0,
              "save_safetensors: renaming {} to {} failed: {}", path_, final_, errno_str());
  committed_ = true;
  disarm(slot_);  // the name is the final file's now: a signal must not remove it
  slot_ = -1;
  // Make the rename itself durable. Some file systems refuse fsync on a directory
  // (EINVAL); the file is complete either way, so that is not an error.
  auto slash = final_.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : final_.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace dplab
