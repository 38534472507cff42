// judge_side.cpp: a worker's pipes and one call to it (judge_side.h).
#include "judge_side.h"

#include <signal.h>

#include <stdexcept>

namespace course::judge {

Process worker_from_env() {
  ::signal(SIGPIPE, SIG_IGN);
  Process w;
  w.to = wire::fd_from_env("DPLAB_COURSE_JUDGE_TO_WORKER_FD");
  w.from = wire::fd_from_env("DPLAB_COURSE_JUDGE_FROM_WORKER_FD");
  return w;
}

Ranks ranks_from_env() {
  Ranks ranks;
  for (const std::vector<int>& g : wire::fd_groups_from_env("DPLAB_COURSE_RANK_FDS", 4)) {
    Process p;
    p.to = g[0];
    p.from = g[1];
    ranks.control.push_back(p);
    ranks.links.push_back({g[2], g[3]});
  }
  if (!ranks.control.empty()) ::signal(SIGPIPE, SIG_IGN);
  return ranks;
}

void call_worker(Process& w, const char* name, const wire::Writer& request,
                 const std::function<void(wire::Reader&)>& read) {
  const std::string fn = std::string(name) + "()";
  if (w.to < 0 || w.from < 0)
    throw std::runtime_error(fn + ": no worker to run it (this test program is the grader's judge; "
                             "`meson test` in your folder runs your code in the tests themselves)");
  if (w.lost) throw std::runtime_error(fn + " was not run: " + w.why);
  auto lose = [&](const std::string& why) { return std::runtime_error(fn + ": " + w.lose(why)); };
  if (!wire::write_frame(w.to, request.bytes()))
    throw lose("the process running your code had ended before the call (a crash, or an exit, above?)");
  std::string reply;
  switch (wire::read_frame(w.from, reply)) {
    case wire::Read::kFrame: break;
    case wire::Read::kClosed:
    case wire::Read::kTruncated:
      throw lose("the process running your code ended before it returned (a crash, or an exit?)");
    case wire::Read::kTooLong:
      throw lose("the process running your code answered with more bytes than the grader reads (did your "
                 "code write to a file descriptor it does not own?)");
  }
  try {
    wire::Reader in(reply);
    const std::uint8_t status = in.u8();
    if (status == 1) {
      const std::string what = in.str();
      in.end();
      throw std::runtime_error(what);  // the student's exception, in its own words
    }
    if (status != 0) throw wire::Error("an unknown reply status");
    read(in);
    in.end();
  } catch (const wire::Error& e) {
    throw lose(std::string("the process running your code answered what the grader does not read (") + e.what() +
               "; did your code write to a file descriptor it does not own?)");
  }
}

}  // namespace course::judge
