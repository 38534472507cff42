// crash.cpp: a crash report the grader can turn into feedback. On SIGSEGV, SIGBUS, SIGFPE,
// SIGILL or SIGABRT the handler sends one "crash" record: the signal, the faulting address,
// the crashing thread's place (rank, step: harness.h) and its stack as addresses within
// the test program, taken by backward-cpp from the signal's context. The grader, which
// keeps the program, turns them into function names and lines (addr2line) and shows the
// student's own frames. SIGUSR1 takes the same picture without ending the process: the
// grader sends it to every thread of a test that ran out of time, to say where it hung.
// Records are written with one write() each (atomic on a pipe up to PIPE_BUF bytes), so
// the handler takes no lock.
// Read next: ../grader/feedback.py (how the grader words a crash).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "channel.h"
#include "harness.h"

#if __has_include(<backward.hpp>)
#include <backward.hpp>
#define DPLAB_HAVE_BACKWARD 1
#else
#include <execinfo.h>
#endif

extern "C" char __executable_start;  // the first byte of the test program in memory (ld)

namespace course::harness {
namespace {

constexpr int kFrames = 24;
std::atomic<int> g_crashing{0};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "SIGUSR1";
  }
}

// The stack at the signal, innermost frame first, as addresses in this process.
int frames_at(void* context, siginfo_t* info, void** out) {
#ifdef DPLAB_HAVE_BACKWARD
  auto* uc = static_cast<ucontext_t*>(context);
  void* pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  backward::StackTrace st;
  st.load_from(pc, kFrames, context, info ? info->si_addr : nullptr);
  int n = 0;
  for (std::size_t i = 0; i < st.size() && n < kFrames; ++i)
    if (st[i].addr) out[n++] = st[i].addr;
  return n;
#else
  (void)context;
  (void)info;
  return ::backtrace(out, kFrames);
#endif
}

void report(int sig, siginfo_t* info, void* context, const char* kind) {
  void* frames[kFrames];
  const int n = frames_at(context, info, frames);
  const Place& p = place();
  char buf[3800];
  int len = std::snprintf(buf, sizeof buf,
                          "{\"token\": \"%s\", \"kind\": \"%s\", \"signal\": \"%s\", \"code\": %d, "
                          "\"addr\": \"%p\", \"rank\": %d, \"size\": %d, \"step\": %d, \"step_word\": \"%s\", "
                          "\"base\": \"%p\", \"frames\": [",
                          token(), kind, signal_name(sig), info ? info->si_code : 0,
                          info ? info->si_addr : nullptr, p.rank, p.size, p.step, p.step_word,
                          static_cast<void*>(&__executable_start));
  for (int i = 0; i < n && len < static_cast<int>(sizeof buf) - 40; ++i)
    len += std::snprintf(buf + len, sizeof buf - len, "%s\"%p\"", i ? ", " : "", frames[i]);
  len += std::snprintf(buf + len, sizeof buf - len, "]}\n");
  if (channel_open()) {
    send_raw_record(buf, static_cast<std::size_t>(len));
  } else if (std::strcmp(kind, "crash") == 0) {  // a student's own run: say it in words
    char words[200];
    const int w = std::snprintf(words, sizeof words, "\n*** %s%s%d%s%s\n", signal_name(sig),
                                p.rank >= 0 ? " on rank " : "", p.rank >= 0 ? p.rank : 0,
                                p.step >= 0 ? " in " : "", p.step >= 0 ? p.step_word : "");
    ssize_t ignored = ::write(2, words, static_cast<std::size_t>(w));
    (void)ignored;
  }
}

void on_fatal(int sig, siginfo_t* info, void* context) {
  if (g_crashing.exchange(1) == 0) report(sig, info, context, "crash");
  else
    for (;;) ::pause();  // another thread is reporting; the process ends with it
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // the grader sees the real signal as the exit status
}

void on_sample(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  report(sig, info, context, "stack");
  errno = saved;
}

}  // namespace

void install_crash_handlers() {
  static char main_stack[64 * 1024];  // the main thread's signal stack (rank threads: thread_begin)
  stack_t ss{};
  ss.ss_sp = main_stack;
  ss.ss_size = sizeof main_stack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
  sa.sa_sigaction = on_sample;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

}  // namespace course::harness
