// hang_report.cpp: from every rank's filed progress to one sentence naming the hung rank.
// Pure string work over snapshots (tested without processes in tests/parallel), plus the
// /proc read that tells a stopped process (SIGSTOP, a debugger) from a busy one.
// Read next: mailbox_transport.cpp.
#include "parallel/transport/hang_report.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/core.h>

#include "framework/error.h"

namespace dplab::parallel {

char process_state(int32_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 'X';
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return '?';
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');  // the command name may itself hold ')' or spaces
  if (close == std::string::npos || close + 2 >= line.size()) return '?';
  return line[close + 2];
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::vector<int> r = ranks;
  std::sort(r.begin(), r.end());
  std::string s;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") +
         (j == i ? std::to_string(r[i]) : fmt::format("{}-{}", r[i], r[j]));
    i = j + 1;
  }
  return s;
}

namespace {

bool stopped(char state) { return state == 'T' || state == 't'; }
bool dead(char state) { return state == 'Z' || state == 'X'; }

// A rank whose own wait is no evidence of progress: the chain of waits ends there.
bool ends_chain(const RankProgress& p) {
  return p.waiting_on < 0 || stopped(p.process_state) || dead(p.process_state);
}
// A rank whose wait has not woken for long: not running, stopped or starved of a core.
bool silent(const RankProgress& p) { return p.silent_s > kSilentAfterSeconds; }

std::string state_words(const RankProgress& p) {
  if (stopped(p.process_state)) return "its process is stopped (SIGSTOP or a debugger)";
  if (dead(p.process_state)) return "its process has died";
  if (p.waiting_on >= 0)
    return fmt::format("its wait on rank {} has not woken up for {:.1f} s (the process is not "
                       "running)",
                       p.waiting_on, p.silent_s);
  if (p.process_state == 'D') return "its process is blocked in the kernel (I/O?)";
  return "it waits on no rank: busy or stuck outside the collectives";
}

}  // namespace

std::string describe_out_of_step(const std::vector<std::pair<int, RankProgress>>& ranks) {
  // grouped by (number, name): the same number with another name is a mismatch too
  std::map<std::pair<uint64_t, std::string>, std::vector<int>> groups;
  for (const auto& [rank, p] : ranks) groups[{p.collectives, p.collective}].push_back(rank);
  if (groups.size() < 2) return "";
  std::string s;
  for (const auto& [at, who] : groups)
    s += fmt::format("{}{} {} {} at {} #{}", s.empty() ? "" : "; ",
                     who.size() == 1 ? "rank" : "ranks", rank_ranges(who),
                     who.size() == 1 ? "is" : "are", at.second, at.first);
  return s;
}

std::string describe_hang(int me, int peer, const std::vector<RankProgress>& ranks) {
  const int n = static_cast<int>(ranks.size());
  // Follow the waits from the peer: the rank at the end waits on nobody, so it is the one
  // that stopped making progress. A cycle means the ranks wait on each other (a deadlock:
  // different collectives, or different orders of them). A silent rank ends the chain too,
  // unless the waits it filed lead on to a stopped or dead process: that is the better
  // evidence (on a loaded machine a rank starved of a core for a second looks silent, while
  // the rank it waits on is the one a signal stopped).
  std::vector<bool> seen(static_cast<size_t>(n), false);
  seen[me] = true;
  std::vector<int> chain{me};
  size_t first_silent = 0;  // its index in chain; 0: none
  int at = peer;
  while (at >= 0 && at < n && !seen[at]) {
    seen[at] = true;
    chain.push_back(at);
    if (first_silent == 0 && silent(ranks[at])) first_silent = chain.size() - 1;
    at = ends_chain(ranks[at]) ? -1 : ranks[at].waiting_on;
  }
  const RankProgress& last = ranks[chain.back()];
  const bool gone = at < 0 && (stopped(last.process_state) || dead(last.process_state));
  if (first_silent > 0 && !gone) {
    chain.resize(first_silent + 1);
    at = -1;
  }
  std::string waits;
  for (size_t i = 0; i + 1 < chain.size(); ++i)
    waits += fmt::format("{}rank {} waits on rank {}", i ? ", " : "", chain[i], chain[i + 1]);
  std::string s;
  const int end = chain.back();
  if (at >= 0 && at < n) {
    s = fmt::format("the ranks wait on each other in a cycle ({}, rank {} waits on rank {}): "
                    "they called different collectives or the same ones in a different order",
                    waits, end, at);
  } else {
    const RankProgress& hung = ranks[end];
    s = fmt::format("rank {} stopped making progress in {} #{}: {}", end, hung.collective,
                    hung.collectives, state_words(hung));
    if (!waits.empty()) s += fmt::format(" ({})", waits);
  }
  std::vector<std::pair<int, RankProgress>> all;
  for (int r = 0; r < n; ++r) all.emplace_back(r, ranks[r]);
  if (std::string d = describe_out_of_step(all); !d.empty())
    s += fmt::format(". Out of step: {}", d);
  return s;
}

Seconds late_rank_grace(Seconds timeout) {
  return std::clamp(timeout * 0.5, Seconds(1.0), Seconds(5.0));
}

std::string find_late_ranks(Store& store, const std::string& key_prefix, int rank, int size,
                            uint64_t number, const std::string& collective, Seconds grace) {
  store.set(key_prefix + std::to_string(rank), fmt::format("{} {}", number, collective));
  // give the others the grace period to find their own collective stuck and file it
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(grace);
  std::vector<bool> filed(static_cast<size_t>(size), false);
  for (bool all = false; !all && std::chrono::steady_clock::now() < deadline;) {
    all = true;
    for (int r = 0; r < size; ++r) {
      if (!filed[r]) filed[r] = store.check({key_prefix + std::to_string(r)});
      all = all && filed[r];
    }
    if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::pair<int, RankProgress>> reported;
  std::vector<int> silent;
  for (int r = 0; r < size; ++r) {
    if (!filed[r]) {
      silent.push_back(r);
      continue;
    }
    // "<number> <name>"
    const std::string v = store.get(key_prefix + std::to_string(r));
    RankProgress p;
    auto space = v.find(' ');
    std::from_chars(v.data(), v.data() + (space == std::string::npos ? v.size() : space),
                    p.collectives);
    p.collective = space == std::string::npos ? "?" : v.substr(space + 1);
    reported.emplace_back(r, p);
  }
  std::string s =
      silent.empty()
          ? std::string("every rank is stuck in a collective")
          : fmt::format("{} {} stopped making progress: {} not report being stuck in a "
                        "collective within {:.1f} s (stopped, dead, or busy outside the "
                        "collectives)",
                        silent.size() == 1 ? "rank" : "ranks", rank_ranges(silent),
                        silent.size() == 1 ? "it did" : "they did", grace.count());
  if (std::string d = describe_out_of_step(reported); !d.empty()) s += ". Out of step: " + d;
  return s;
}

}  // namespace dplab::parallel
