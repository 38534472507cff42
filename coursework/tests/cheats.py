"""cheats.py: the shortcuts a student might try, as code put into an assignment's starter.

Each cheat is the starter with `top` added at its start and `body` put before every
`throw std::logic_error("not implemented yet ...")` (or the whole file replaced by `file`).
Placeholders: @RESULTS@ (the results.json the grade writes), @HIDDEN@ (the hidden tests),
@REFERENCE@ (the reference solution), @CACHE@ (the grader's cache), @HW_DIR@ (the course's
folder of the assignment, as a path relative to the source root).
`RUNTIME` cheats talk to the kernel through raw system calls (inline assembly), which nm
cannot see: the grader stops them statically too (no syscall instruction is allowed), and
check_assignment.py grades them again with that check off, so that the runtime defences
(the channel's token, the sandbox's user and namespace, kill-all) are tested alone. They
go into one submission (combined()): each test case of the assignment runs one of them,
chosen by the test's name (from the environment, before main), so one grade tries them all,
each in processes of its own.
`expect`: words the feedback must contain (any of them); `never`: words neither the feedback
nor the grader's console may show (what a file read at compile time holds; @TEST@: each of
the assignment's test names).
An assignment judged outside the student's process ("judge": "outside": hw1, hw3) runs the
student's code in a worker (hw3: one per rank) that is never told its test's name: there each runtime cheat
gets a grade of its own, and the words of a worker that ended or wrote to its reply pipe
("the process running your code ...") count as the expected ones. `OUTSIDE` are the cheats
that only a judge outside stops (#45): they are graded with the static checks off too.
"""
import os
import re
import subprocess

RAW = r"""
#include <cstdio>
#include <cstring>
namespace {
long dplab_raw(long n, long a = 0, long b = 0, long c = 0) {
  long r;
  asm volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}
void dplab_sleep_ms(long ms) {
  struct { long s, ns; } t{ms / 1000, (ms % 1000) * 1000000};
  dplab_raw(35, reinterpret_cast<long>(&t));
}
void dplab_name() { dplab_raw(157, 15, reinterpret_cast<long>("dplabcheat")); }  // PR_SET_NAME
long dplab_open(const char* path, long flags, long mode = 0) {
  return dplab_raw(2, reinterpret_cast<long>(path), flags, mode);
}
void dplab_write(long fd, const char* text) { dplab_raw(1, fd, reinterpret_cast<long>(text), std::strlen(text)); }
}  // namespace
"""

# How long a check leaves a grade's results.json alone before it reads it again: a surviving
# "detached child" (below) rewrites it every 50 ms and has had 20 chances by then. A lower
# bound on time (a sleep never ends early), never a verdict on it.
SETTLE_S = 1.0

FORGED_RESULTS = r'{\"score\": 100.0, \"output\": \"forged\", \"tests\": []}'
FORGED_VERDICT = (r'{\"token\": \"0123456789abcdef0123456789abcdef\", \"kind\": \"end\", \"test\": \"x\", '
                  r'\"passed\": true, \"checks\": 1, \"failed\": 0, \"more\": 0, \"messages\": []}\n')

STATIC = [
    {"name": "exit 0 through the C library", "top": "#include <cstdlib>\n", "body": "std::_Exit(0);",
     "expect": ["may not call _Exit"]},
    {"name": "the reference included by its path", "file": '#include "@REFERENCE@"\n',
     "expect": ["does not compile", "your files may include only"]},
    {"name": "the reference included through the course's folder", "file": '#include "@HW_DIR@/@STUDENT_FILE@"\n',
     "expect": ["does not compile", "your files may include only"]},
    {"name": "a library header the assignment does not give", "top": '#include "parallel/algorithms/collectives.h"\n',
     "body": "", "expect": ["does not compile", "your files may include only"]},
    {"name": "a system call in inline assembly", "top": RAW, "body": "dplab_raw(231, 0);",
     "expect": ["makes a system call itself"]},
    {"name": "replaces write() for the whole program",
     "top": 'extern "C" long write(int, const void*, unsigned long) { return 0; }\n', "body": "",
     "expect": ["your files define write"]},
]

# Files read at compile time behind the include check's back: the assembler's .incbin (its
# name spelled through macros, string concatenation and a comment that gas drops, so that
# no scan of the source or the assembly finds the word), its .include (through a gas macro;
# a file that is not assembly shows its lines in the assembler's errors) and #embed (C23,
# C++26: GCC 15 takes it in C++ too). The file is /etc/passwd: any user can read it, and
# its first line's words (PASSWD) must never reach the feedback.
PASSWD = "root:x:0:0"
COMPILE_TIME_READS = [
    {"name": "the assembler's .incbin of a file, spelled through macros",
     "top": r"""#include <cstdio>
#define DPLAB_WORD2(x) #x
#define DPLAB_WORD(x) DPLAB_WORD2(x)
asm(".pushsection .rodata\ndplab_blob:\n." DPLAB_WORD(inc) "/* */" "bin \"/etc/" "passwd\"\n.byte 0\n.popsection");
""",
     "body": r'{ const char* blob; asm("lea dplab_blob(%%rip), %0" : "=r"(blob)); std::fputs(blob, stdout); }',
     "expect": ["makes the assembler read /etc/passwd"], "never": [PASSWD]},
    {"name": "the assembler's .include of a file, through a gas macro",
     "top": r"""asm(".macro dplab_read what\n.in\\what \"/etc/passwd\"\n.endm\ndplab_read clude");
""",
     "body": "", "expect": ["does not assemble", "makes the assembler read /etc/passwd"], "never": [PASSWD]},
    {"name": "a file embedded at compile time (#embed)",
     "top": """#include <cstdio>
static const unsigned char dplab_embedded[] = {
#embed "/etc/passwd"
, 0};
""",
     "body": "std::fputs(reinterpret_cast<const char*>(dplab_embedded), stdout);",
     "expect": ["does not compile", "your files may include only"], "never": [PASSWD]},
]
STATIC += COMPILE_TIME_READS

# Weak definitions that replace a function of the program's libraries for the whole test
# program (#45): fmt::vformat returning "" blanks every sentence the tests build with
# fmt::format, the words of a failed check among them, so that failed checks pass (hw3
# scored 85 with no reduction); a steady_clock::now() that advances a microsecond a call
# makes a slow ring look fast to the speed test (with the first, hw3 scored 100 with no
# ring). A program's own weak definition wins over a shared library's; symbols.py refuses
# both, naming the function and the library it belongs to.
# fmt's headers are no assignment's to include: fmt::vformat is defined by its linker name
# (@VFORMAT@: vformat_symbol()), with the same registers (a pointer and a length, then two
# words) and a std::string returned where the caller says.
WEAK_VFORMAT = r"""#include <string>
__attribute__((weak)) std::string dplab_vformat(const char*, unsigned long, unsigned long long, const void*)
    __asm__("@VFORMAT@");
__attribute__((weak)) std::string dplab_vformat(const char*, unsigned long, unsigned long long, const void*) {
  return {};
}
"""
WEAK_NOW = r"""#include <chrono>
namespace std::chrono { inline namespace _V2 {
__attribute__((weak)) steady_clock::time_point steady_clock::now() noexcept {
  static long ticks = 0;
  return time_point(duration(ticks += 1000));
}
} }
"""
REPLACEMENTS = [
    {"name": "a weak fmt::vformat replaces the library's for the whole program", "top": WEAK_VFORMAT, "body": "",
     "expect": ["vformat, which libfmt"]},
    {"name": "a weak steady_clock::now() replaces the library's for the whole program", "top": WEAK_NOW,
     "body": "", "expect": ["steady_clock::now, which libstdc++"]},
]
STATIC += REPLACEMENTS

# What the judge outside says of a worker that ended, or wrote bytes that are no reply
WORKER_ENDED = "the process running your code"
WORKER_ANSWERED = "answered with more bytes than the grader reads"
HW4_DID_NOTHING = "after training, but one process on the whole batch gets"  # hw4's ranks averaged nothing

RUNTIME = [
    {"name": "exit 0 with a raw system call", "top": RAW, "body": "dplab_raw(231, 0);",
     "expect": ["the test ended before its checks ran: it exited with status 0", WORKER_ENDED]},
    {"name": "prints PASS lines, then exits 0", "top": RAW,
     "body": r'std::printf("[doctest] test cases: 1 | 1 passed | 0 failed | 0 skipped\n'
             r'[doctest] Status: SUCCESS!\nPASS\n"); std::fflush(stdout); dplab_raw(231, 0);',
     "expect": ["the test ended before its checks ran", WORKER_ENDED]},
    {"name": "forges a verdict on every descriptor, then exits 0", "top": RAW,
     "body": 'for (long fd = 3; fd < 64; ++fd) dplab_write(fd, "' + FORGED_VERDICT + '"); dplab_raw(231, 0);',
     "expect": ["without the grader's token", WORKER_ANSWERED, WORKER_ENDED]},
    {"name": "reads and overwrites the hidden tests, the reference and the cache", "top": RAW,
     "body": r"""{ static char buf[4096];
       for (const char* p : {"@HIDDEN@", "@REFERENCE@"}) {
         long fd = dplab_open(p, 0);
         if (fd >= 0) { long n = dplab_raw(0, fd, reinterpret_cast<long>(buf), sizeof buf - 1);
                        if (n > 0) dplab_raw(1, 1, reinterpret_cast<long>(buf), n); }
         fd = dplab_open(p, 01 | 02000);  // O_WRONLY | O_APPEND
         if (fd >= 0) dplab_write(fd, "// dplabcheat was here\n");
       }
       dplab_open("@CACHE@/dplabcheat", 01 | 0100, 0644); }""",
     "expect": ["not implemented yet"]},
    {"name": "a detached child rewrites results.json after the grader exits", "top": RAW,
     "body": r"""if (dplab_raw(57) == 0) {
         dplab_raw(112); dplab_name(); dplab_raw(3, 0); dplab_raw(3, 1); dplab_raw(3, 2);
         for (int i = 0; i < 1200; ++i) {
           dplab_sleep_ms(50);
           long fd = dplab_open("@RESULTS@", 01 | 01000);  // O_WRONLY | O_TRUNC
           if (fd >= 0) { dplab_write(fd, "@FORGED@"); dplab_raw(3, fd); }
           // or, where the folder lets it, a forged file of its own renamed over it
           fd = dplab_open("@RESULTS@.forged", 01 | 0100 | 01000, 0644);  // O_WRONLY | O_CREAT | O_TRUNC
           if (fd >= 0) { dplab_write(fd, "@FORGED@"); dplab_raw(3, fd);
                          dplab_raw(82, reinterpret_cast<long>("@RESULTS@.forged"),  // rename
                                    reinterpret_cast<long>("@RESULTS@")); }
         }
         dplab_raw(231, 0);
       }""".replace("@FORGED@", FORGED_RESULTS),
     "expect": ["not implemented yet"]},
    {"name": "a child that outlives its test", "top": RAW,
     "body": r"""if (dplab_raw(57) == 0) { dplab_name(); for (int i = 0; i < 6000; ++i) dplab_sleep_ms(50);
                                      dplab_raw(231, 0); }""",
     "expect": ["not implemented yet"]},
]

# Two cheats that scored 100 on hw1 while its tests ran in the student's process (#45):
# a static constructor that reads the run's token before the harness does and writes a
# passing verdict for its test on every descriptor, then exits; and a weak fmt::vformat
# that blanks every sentence the tests build with fmt::format, the words of a failed check
# among them, while every backward returns nothing. In a worker there is no channel and no
# token, and the tests' fmt and clock are not the worker's (the static checks refuse both
# besides: REPLACEMENTS).
OUTSIDE = [
    {"name": "a static constructor reads the token and writes a passing verdict", "top": RAW + r"""
#include <cstdlib>
namespace {
struct DplabVerdict {
  DplabVerdict() {
    static char token[64], cmd[8192], name[4096], record[8192];
    if (const char* t = std::getenv("DPLAB_COURSE_TOKEN_FD")) {  // before the harness reads it
      long n = dplab_raw(0, std::atol(t), reinterpret_cast<long>(token), 32);
      token[n > 0 ? n : 0] = 0;
    }
    if (const char* t = std::getenv("DPLAB_COURSE_TEST_CASE"))  // the grader names the test there
      std::snprintf(name, sizeof name, "%s", t);
    std::snprintf(record, sizeof record, "{\"token\": \"%s\", \"kind\": \"end\", \"test\": \"%s\", "
                  "\"passed\": true, \"checks\": 1, \"failed\": 0, \"more\": 0, \"messages\": []}\n", token, name);
    for (long out = 3; out <= 64; ++out) dplab_write(out, record);
    dplab_raw(231, 0);
  }
} dplab_verdict;
}  // namespace
""", "body": "", "expect": [WORKER_ENDED, WORKER_ANSWERED]},
    # (the judges outside word what did nothing in their own terms: hw3 a ring, hw2 a
    # chunk_sizes, hw4 a reducer, hw5 a step; their fmt is not the worker's)
    {"name": "a weak fmt::vformat blanks the tests' failure messages", "top": WEAK_VFORMAT, "body": "@RETURN_NOTHING@",
     "expect": ["is not defined", "your files define", "may not", "never arrived there", "torch.chunk gives",
                "changed nothing", HW4_DID_NOTHING]},
    {"name": "a weak steady_clock::now() slows the clock", "top": WEAK_NOW, "body": "@RETURN_NOTHING@",
     "expect": ["is not defined", "your files define", "may not", "never arrived there", "torch.chunk gives",
                "changed nothing", HW4_DID_NOTHING]},
    {"name": "replies on every descriptor with a tensor of 2^31 x 2^31 floats in 8 bytes", "top": RAW,
     "body": r"""{ static unsigned char frame[64];
       unsigned n = 0;
       auto put = [&](const void* p, unsigned k) { std::memcpy(frame + 4 + n, p, k); n += k; };
       const unsigned char head[] = {0, 1, 1, 2};  // returned, 1 tensor, float32, 2 dimensions
       const long long side = 1LL << 31;
       put(head, 4);
       put(&side, 8);
       put(&side, 8);
       std::memcpy(frame, &n, 4);
       for (long fd = 3; fd <= 64; ++fd) dplab_raw(1, fd, reinterpret_cast<long>(frame), 4 + n); }""",
     "expect": ["answered what the grader does not read"]},
    {"name": "looks for its test's name in every process's command line", "top": RAW,
     "body": r"""{ static char buf[4096], path[64];
       const long me = dplab_raw(39);  // getpid: the judge started just after the worker
       for (long pid = me > 2000 ? me - 2000 : 1; pid < me + 2000; ++pid) {
         std::snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
         const long fd = dplab_open(path, 0);
         if (fd < 0) continue;
         const long n = dplab_raw(0, fd, reinterpret_cast<long>(buf), sizeof buf - 1);
         dplab_raw(3, fd);
         buf[n > 0 ? n : 0] = 0;
         for (long i = 0; i < n; i += std::strlen(buf + i) + 1)
           if (std::strncmp(buf + i, "--test-case=", 12) == 0) std::printf("seen: %s\n", buf + i);
       }
       std::fflush(stdout); }""",
     "expect": ["not implemented yet"], "never": ["seen: --test-case=@TEST@"]},
]

THROW = 'throw std::logic_error("not implemented yet'
VFORMAT_V9 = ("_ZN3fmt2v97vformatB5cxx11ENS0_17basic_string_viewIcEENS0_17basic_format_argsINS0_20basic_format_"
              "contextINS0_8appenderEcEEEE")


def vformat_symbol():
    """fmt::vformat's linker name in the libfmt this machine links (its namespace is fmt's
    version: v9 here)."""
    lib = subprocess.run([os.environ.get("CXX", "c++"), "-print-file-name=libfmt.so"], capture_output=True,
                         text=True).stdout.strip()
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        name = line.split()[-1] if line.split() else ""
        if " T " in line and re.match(r"_ZN3fmt2v\d+7vformatB5cxx11E", name):
            return name
    return VFORMAT_V9


def combined(names, values):
    """One cheat that does RUNTIME[i % len(RUNTIME)] in the i-th test of `names`; returns the
    cheat and which runtime cheat each test runs."""
    table = ", ".join('"' + n.replace("\\", "\\\\").replace('"', '\\"') + '"' for n in names)
    which = r"""
#include <cstdlib>
namespace {
// The grader names the test in the environment, and the harness's main() takes it out: read
// it before main, in a static initialiser. (/proc/self/environ is closed to a process whose
// program its user may run but not read.)
const char* const dplab_test_name = [] {
  const char* t = std::getenv("DPLAB_COURSE_TEST_CASE");
  return t ? strdup(t) : "";
}();
int dplab_which() {  // the index of this test case among the grader's
  static const char* names[] = {@TABLE@};
  for (unsigned k = 0; k < sizeof names / sizeof names[0]; ++k)
    if (std::strcmp(dplab_test_name, names[k]) == 0) return static_cast<int>(k);
  return -1;
}
}  // namespace
""".replace("@TABLE@", table)
    cases = "".join(f"case {k}: {{ {c['body']} }} break;\n" for k, c in enumerate(RUNTIME))
    body = f"switch (dplab_which() % {len(RUNTIME)}) {{\n{cases}default: break; }}"
    plan = {n: RUNTIME[i % len(RUNTIME)] for i, n in enumerate(names)}
    return {"name": "every runtime cheat, one per test", "top": RAW + which, "body": body}, plan


def _before_each_throw(starter_text, body):
    """body before each THROW; @RETURN_NOTHING@ in it becomes `return;` in a function that
    returns void (hw3's ring, hw4's reducer's methods), `return {};` in one that returns a
    value (hw1's backwards). The function is the last definition above the throw: a line that
    begins with a type, a name and its parameters, with no `;` (a method in a class too; its
    parameters may go on over several lines; not an if, a for or a return)."""
    out, at = [], 0
    definition = re.compile(r"^\s*(?!(?:return|else|case)\b)[A-Za-z_][\w:<>, *&]*\s[\w:~]+\([^;]*$")
    for m in re.finditer(re.escape(THROW), starter_text):
        header = [line.strip() for line in starter_text[:m.start()].splitlines() if definition.match(line)]
        nothing = "return;" if header and header[-1].startswith("void ") else "return {};"
        out.append(starter_text[at:m.start()] + body.replace("@RETURN_NOTHING@", nothing) + "\n  ")
        at = m.start()
    return "".join(out) + starter_text[at:]


def make(starter_text, cheat, values):
    """The cheat's source file from the starter's text."""
    if "file" in cheat:
        text = cheat["file"]
    else:
        if THROW not in starter_text:
            raise ValueError("the starter has no 'not implemented yet' throw to put a cheat before")
        text = cheat.get("top", "") + _before_each_throw(starter_text, cheat.get("body", ""))
    text = text.replace("@RAW@", RAW)  # an assignment's own cheat (ci_checks.json) may use RAW's calls
    if "@VFORMAT@" in text:
        text = text.replace("@VFORMAT@", vformat_symbol())
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text
