// checks_machine.cpp: what the machine offers a job of several ranks: cores, memory, room in
// /dev/shm (where the shm transport's slots live), whether one process can open another's
// memfd through /proc (the shm transport's premise: rank 0 creates the block, the others open
// /proc/<pid>/fd/<n>; some containers forbid it), and the network interfaces (for jobs that
// span machines). The memfd probe forks: it runs before anything initialises CUDA.
// Read next: checks_gpu.cpp.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

void machine_checks(Report& r) {
  const int cores = parallel::cpu_cores();
  r.fact("cores usable", fmt::format("{}", cores));
  const long long total = meminfo_kb("MemTotal"), avail = meminfo_kb("MemAvailable");
  r.fact("memory", fmt::format("{} total, {} available", gib(total * 1024.0), gib(avail * 1024.0)));

  Check shm{.section = "machine", .name = "/dev/shm (the shm transport's slots)"};
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) {
    shm.verdict = Verdict::Fail;
    shm.detail = fmt::format("cannot stat /dev/shm: {}", std::strerror(errno));
    shm.fix = "the ring and star engines need a tmpfs at /dev/shm: mount -t tmpfs tmpfs /dev/shm "
              "(or, in Docker, --shm-size=1g)";
  } else {
    const double room = static_cast<double>(vfs.f_bavail) * vfs.f_frsize;
    shm.detail = fmt::format("{} free", gib(room));
    if (room < 256.0 * 1024 * 1024) {
      shm.verdict = Verdict::Warn;
      shm.fix =
          "under 256 MiB: a job with many ranks or large buckets may not fit (Docker's default "
          "is 64 MiB: run the container with --shm-size=1g)";
    }
  }
  r.add(shm);

  Check memfd{.section = "machine", .name = "one process opens another's memfd (/proc/<pid>/fd)"};
  const std::string why = memfd_across_processes();
  if (why.empty()) {
    memfd.detail = "works: ranks of one job can share memory";
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
