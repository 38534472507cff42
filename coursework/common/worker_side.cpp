// worker_side.cpp: a worker's start (worker_side.h).
#include "worker_side.h"

#include <signal.h>

#include <cstdio>
#include <exception>
#include <string>

#include "channel.h"
#include "wire.h"

namespace course::harness {
void install_crash_handlers();  // crash.cpp
}

namespace course::worker {

std::optional<Pipes> start(Role role) {
  const char* who = role == Role::kRank ? "rank" : "worker";
  std::string why;
  if (!harness::open_channel(why)) {  // the crash reports' pipe (no verdicts read there)
    std::fprintf(stderr, "%s: %s\n", who, why.c_str());
    return std::nullopt;
  }
  harness::install_crash_handlers();
  ::signal(SIGPIPE, SIG_IGN);
  Pipes p;
  p.in = wire::fd_from_env("DPLAB_COURSE_WORKER_IN_FD");
  p.out = wire::fd_from_env("DPLAB_COURSE_WORKER_OUT_FD");
  bool complete = p.in >= 0 && p.out >= 0;
  if (role == Role::kRank) {
    p.to_broker = wire::fd_from_env("DPLAB_COURSE_TO_BROKER_FD");
    p.from_broker = wire::fd_from_env("DPLAB_COURSE_FROM_BROKER_FD");
    complete = complete && p.to_broker >= 0 && p.from_broker >= 0;
  }
  if (!complete) {
    std::fprintf(stderr, "%s: started without the grader's pipes\n", who);
    return std::nullopt;
  }
  return p;
}

void serve(const Pipes& pipes, const std::function<std::string(const std::string&)>& answer) {
  std::string request;
  while (wire::read_frame(pipes.in, request) == wire::Read::kFrame) {
    std::string reply;
    try {
      reply = answer(request);
    } catch (const std::exception& e) {
      reply = wire::error_reply(e.what());
    } catch (...) {
      reply = wire::error_reply("an exception that is not a std::exception");
    }
    std::fflush(stdout);  // what the student printed comes before the reply is judged
    if (!wire::write_frame(pipes.out, reply)) break;
  }
}

}  // namespace course::worker
