// checks_machine.cpp: what the machine offers a job of several ranks: cores, memory, whether
// one process can open another's memfd through /proc (the shm transport's premise: rank 0
// creates the block, a memfd that no directory names, so /dev/shm plays no part; the others
// open /proc/<pid>/fd/<n>; some containers forbid it), enough file descriptors for the
// store's connections and the launcher's pipes, and the network interfaces (for jobs that
// span machines). The memfd probe forks: it runs before anything initialises CUDA.
// Read next: checks_gpu.cpp.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "parallel/transport/mailbox_transport.h"
#include "tools/doctor/doctor.h"

namespace dplab::doctor {
namespace {

// kB from /proc/meminfo's line `key`, or -1.
long long meminfo_kb(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  return -1;
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024)); }

// A child process opens the parent's memfd by its /proc path, as rank 1 opens rank 0's
// block, and writes one byte the parent then reads. "" when it worked, else why not.
std::string memfd_across_processes() {
  const int fd = memfd_create("dplab-doctor-probe", MFD_CLOEXEC);
  if (fd < 0) return fmt::format("memfd_create failed: {}", std::strerror(errno));
  if (ftruncate(fd, 4096) != 0) {
    close(fd);
    return fmt::format("ftruncate of a memfd failed: {}", std::strerror(errno));
  }
  const std::string path = fmt::format("/proc/{}/fd/{}", getpid(), fd);
  const pid_t child = fork();
  if (child == 0) {
    const int theirs = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (theirs < 0) _exit(10 + (errno == EACCES ? 1 : errno == ENOENT ? 2 : 3));
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, theirs, 0);
    if (p == MAP_FAILED) _exit(20);
    static_cast<char*>(p)[0] = 'd';
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  char byte = 0;
  const bool wrote = pread(fd, &byte, 1, 0) == 1 && byte == 'd';
  close(fd);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0 && wrote) return "";
  if (code == 11) return fmt::format("opening {} from another process: permission denied", path);
  if (code == 12) return fmt::format("{} is not visible to another process (no such file)", path);
  if (code == 20) return "mapping another process's memfd failed";
  return fmt::format("the probe process ended with status {}", status);
}

}  // namespace

long descriptor_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 1L << 30;
  return static_cast<long>(lim.rlim_cur);
}

// Descriptors this process holds open across exec (no close-on-exec) besides the standard
// three, numbered below `limit`: every process it starts inherits them, and each takes one
// of the limit's numbers (a shell's stray redirection, `exec 10</dev/null`, does this).
int inherited_descriptors(long limit) {
  int n = 0;
  std::error_code ec;  // out of descriptors, the listing itself fails: count none
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int fd = -1;
    std::from_chars(name.data(), name.data() + name.size(), fd);
    const int flags = fd > 2 && fd < limit ? fcntl(fd, F_GETFD) : -1;
    n += flags >= 0 && !(flags & FD_CLOEXEC);  // (the listing's own is close-on-exec)
  }
  return n;
}

// The busiest process of a job on one machine, at its busiest, plus what it inherits. Rank
// 0: 3 standard streams, the store's listening socket and wake-up pipe (2), one store
// connection per rank plus its own client's, the shared block's memfd, and a file in /proc
// it reads (the boot id, a peer's state). The launcher (spawn, dplab-run --tee): 3, two
// output pipes per rank, and the 4 pipe ends of the rank it is starting.
int descriptors_needed(int ranks) {
  static const int inherited = inherited_descriptors(descriptor_limit());
  const int rank0 = 3 + 1 + 2 + ranks + 1 + 1 + 1;
  const int launcher = 3 + 2 * ranks + 4;
  return std::max(rank0, launcher) + inherited;
}

void machine_checks(Report& r) {
  const int cores = parallel::cpu_cores();
  r.fact("cores usable", fmt::format("{}", cores));
  const long long total = meminfo_kb("MemTotal"), avail = meminfo_kb("MemAvailable");
  r.fact("memory", fmt::format("{} total, {} available", gib(total * 1024.0), gib(avail * 1024.0)));

  // Each rank keeps one process open to every other; a job of one rank per core is the
  // largest a machine runs well.
  const long limit = descriptor_limit();
  const int ranks = std::max(2, cores);
  Check fds{.section = "machine", .name = "file descriptors a process may open (ulimit -n)"};
  fds.detail = fmt::format("{}; a job of 2 ranks needs {}, of {} (one per core) {}", limit,
                           descriptors_needed(2), ranks, descriptors_needed(ranks));
  if (limit < descriptors_needed(2)) {
    fds.verdict = Verdict::Fail;
    fds.fix = fmt::format("no job of several ranks can start here (the store's connections and "
                          "the launcher's pipes are files): raise the limit, e.g. ulimit -n {} "
                          "(the hard limit: ulimit -Hn)",
                          std::max(1024, descriptors_needed(ranks)));
  } else if (limit < descriptors_needed(ranks)) {
    fds.verdict = Verdict::Warn;
    fds.fix = fmt::format("a job with a rank per core would run out of them: ulimit -n {}",
                          std::max(1024, descriptors_needed(ranks)));
  }
  r.add(fds);

  Check memfd{.section = "machine", .name = "one process opens another's memfd (/proc/<pid>/fd)"};
  const std::string why = memfd_across_processes();
  if (why.empty()) {
    memfd.detail = "works: ranks of one job can share memory (a memfd, not /dev/shm)";
  } else {
    memfd.verdict = Verdict::Fail;
    memfd.detail = why;
    memfd.fix = "the shm transport (engines ring and star between processes) needs it: run every "
                "rank as one user in one PID namespace (a container that hides /proc/<pid>/fd "
                "forbids it); or use threads (spawn-free tutorials) or the mpi engine";
  }
  r.add(memfd);

  // Interfaces with an IPv4 address, up: what a job across machines would bind.
  std::map<std::string, std::string> ifaces;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP))
        continue;
      char text[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      ifaces[a->ifa_name] += (ifaces[a->ifa_name].empty() ? "" : ",") + std::string(text);
    }
    freeifaddrs(list);
  }
  std::string names;
  for (const auto& [name, addr] : ifaces)
    names += fmt::format("{}{} {}", names.empty() ? "" : "; ", name, addr);
  r.fact("network", names.empty() ? "no IPv4 interface up" : names);
  Check net{.section = "machine", .name = "a network interface besides loopback"};
  bool external = false;
  for (const auto& [name, addr] : ifaces) external = external || name != "lo";
  if (external) {
    net.detail = fmt::format("{} interface(s) up", ifaces.size());
  } else {
    net.verdict = Verdict::Warn;
    net.detail = "only loopback";
    net.fix = "jobs on this machine work; a job across machines needs an interface the other "
              "machines can reach (set MASTER_ADDR to its address)";
  }
  r.add(net);
}

}  // namespace dplab::doctor
