"""grade.py: one grade, from a folder of student files to a list of test results.

The order: folders (a private one of the grader's, and one the sandbox may use), the
sandbox (which covers the private folders, the course and the cache), the build
(build.py: staged headers, the student's files compiled as the sandbox's user, the
includes and symbols checked, the tests from the cache, the link), then the tests
(runner.py). Whatever happens, every process of the submission is gone and the folders
are removed before the results are returned.
Read next: build.py, runner.py, results.py.
"""
import os
import shutil
import subprocess
import time

import build
import feedback
import manifest
import symbols
from runner import Runner, test_names
from sandbox import Sandbox, SandboxError, sandbox_parent


class Options:
    def __init__(self, pkg_config_path="", cache_dir=None, keep=None, only=None, static_checks=True,
                 log=print):
        self.pkg_config_path = pkg_config_path
        self.cache_dir = cache_dir      # None: a fresh cache for this grade only
        self.keep = keep                # a path to copy the test program to
        self.only = only                # a substring: run only the tests whose names hold it
        self.static_checks = static_checks  # off only in the grader's own tests of its runtime defences
        self.log = log


def build_failure(message):
    return [{"name": "build", "max_score": 100, "score": 0, "passed": False, "output": message,
             "seconds": 0.0, "hung_at": None, "status": "failed", "visible": True}]


def grade(assignment, student_dir, suites, opts):
    t0 = time.monotonic()
    deadline = t0 + assignment.limits["budget_s"]
    private = build.private_dir("dplab-grade-")
    shared = build.private_dir("dplab-sandbox-", sandbox_parent())
    cache_dir = opts.cache_dir or os.path.join(private, "cache")
    hide = [assignment.course_dir, private, cache_dir] + \
        [p for p in os.environ.get("DPLAB_COURSE_HIDE", "").split(":") if p]
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        # a judge outside runs each test as several users: the judge's and its worker's (hw3: one per rank)
        users = 1 + max(assignment.ranks, 1) if assignment.judge == "outside" else 1
        sandbox = Sandbox(hide=hide, slots=assignment.limits["parallel"] * users)
        if assignment.ranks and sandbox.root and not sandbox.namespaces:
            sandbox.close()  # without them, ranks of different users still share /tmp and loopback
            raise SandboxError(f"{assignment.short}'s ranks are kept apart by mount, network and IPC namespaces, and "
                               f"this kernel refuses them: grade it where namespaces work (a VM, Gradescope)")
    except BaseException:
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
        raise
    try:
        try:
            exe, symbolizer, worker = build_program(assignment, student_dir, suites, opts, sandbox, private, shared,
                                                    cache_dir, deadline)
        except build.BuildFailed as e:
            opts.log(str(e))
            return build_failure(str(e))
        visible = set(test_names(assignment.test_sources(["visible"])))
        names = test_names(assignment.test_sources(suites))
        if opts.only:
            names = [n for n in names if opts.only.lower() in n.lower()]
            if not names:
                return build_failure(f"no test's name holds '{opts.only}'")
        runner = Runner(exe, assignment, sandbox, os.path.join(shared, "runs"), symbolizer, deadline, worker=worker)
        os.makedirs(runner.run_root, mode=0o711)

        def on_result(r):
            r["visible"] = r["name"] in visible
            mark = "PASS" if r["passed"] else "FAIL"
            opts.log(f"{mark} {r['score']:3d}/{r['max_score']:<3d} {r['name']}  ({r['seconds']:.1f} s)")
            if r["output"]:
                opts.log("     " + r["output"].replace("\n", "\n     "))
        results = runner.run_all(names, on_result)
        if opts.keep:  # the tests with the student's code in them, as `meson test` builds them
            shutil.copyfile(os.path.join(private, "tests-inside" if assignment.judge == "outside" else "tests"),
                            opts.keep)
            os.chmod(opts.keep, 0o755)
        return results
    finally:
        for uid in sandbox.uids:
            if sandbox.root:
                sandbox.kill_uid(uid)
        sandbox.reap_orphans(kill=True)
        sandbox.close()
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def build_program(a, student_dir, suites, opts, sandbox, private, shared, cache_dir, deadline):
    cflags, libs = build.dplab_flags(opts.pkg_config_path)
    cache = build.Cache(cache_dir, a.course_dir)
    include_dirs = [f[2:] for f in cflags if f.startswith("-I")]
    src, inc, obj, bindir = (os.path.join(shared, d) for d in ("src", "include", "obj", "bin"))
    for d in (src, inc, bindir):
        os.makedirs(d, mode=0o755)
    os.makedirs(obj)
    os.chmod(shared, 0o711)
    compile_uid = sandbox.uids[-1] if sandbox.root else None
    sandbox.give(obj, compile_uid)

    # 1-3: the staged headers and the student's files, compiled in the sandbox and checked
    defines = [f for f in cflags if f.startswith("-D")]
    system_headers = build.stage_headers(a, cache, include_dirs, defines, inc)
    sources = build.copy_submission(a, student_dir, src)
    objects, names = [], {}
    std_dirs = build.standard_library_dirs()
    for source in sources:
        o = compile_student_file(a, source, src, inc, obj, private, defines, system_headers, std_dirs, sandbox,
                                 compile_uid, deadline)
        objects.append(o)
        names[o] = os.path.basename(source)
    # 4: what the objects call and define
    if opts.static_checks:
        rules = symbols.Rules(a, symbols.load_groups(a.course_dir))
        problems = symbols.check_objects(rules, objects, names,
                                         symbols.library_definitions(libs, cache.dir, build.CXX))
        if problems:
            raise build.BuildFailed("your code calls or defines what the assignment does not allow:\n" +
                                    "\n".join(f"  - {p}" for p in problems[:12]))
    # 5: the course's side, from the cache, linked first
    given = course_objects(a, suites, cache, cflags)
    if a.judge == "outside":
        # the judge: the tests with calls to the worker in the student's place, never their code;
        # the worker: the student's objects after its main and the given code
        worker = link_program(worker_objects(a, cache, cflags) + objects, libs, private, bindir, "worker")
        exe = link_program(given + remote_objects(a, cache, cflags), libs, private, bindir, "tests",
                           course_side=True)
        if opts.keep:
            link_program(in_process_objects(a, suites, cache, cflags) + objects, libs, private, None, "tests-inside")
        return (exe, feedback.Symbolizer(os.path.join(private, "tests"), src),
                (worker, feedback.Symbolizer(os.path.join(private, "worker"), src)))
    exe = link_program(given + objects, libs, private, bindir, "tests")
    return exe, feedback.Symbolizer(os.path.join(private, "tests"), src), None


def link_program(objects, libs, private, bindir, name, course_side=False):
    """Links objects into private/name and puts a copy the sandbox may run, not read, in
    bindir; returns that copy's path."""
    exe = os.path.join(private, name)
    err = build.link(objects, libs, exe)
    if err and course_side:
        raise SystemExit(f"dplab-course: error: the course's own {name} does not link:\n{err}")
    if err:
        raise build.BuildFailed("your files compile, but the program does not link (a function declared but "
                                "never written, or written twice?):\n" + err.replace(private + "/", ""))
    if not bindir:
        return exe
    shutil.copyfile(exe, os.path.join(bindir, name))
    os.chmod(os.path.join(bindir, name), 0o711)  # the sandbox may run it, not read it
    return os.path.join(bindir, name)


def compile_student_file(a, source, src, inc, obj, private, defines, system_headers, std_dirs, sandbox, uid,
                         deadline):
    """One of the student's files to an object, in two steps as the sandbox's user, each
    checked before the next: the compiler proper (-S) to assembly, whose every file read
    (its -MD list) must be an allowed include; then the assembler, whose every file read
    (GNU as --MD: its input, and any .incbin or .include, however the inline assembly spelled
    it) must be that assembly or a file the compiler was allowed to read. A read of anything
    else refuses the file, and an assembler's failure shows only its messages about the
    student's own assembly, never lines of another file."""
    base = os.path.basename(source)
    argv = [build.CXX] + build.STUDENT_FLAGS + defines + [
        "-fdiagnostics-color=never", "-fmax-errors=10", "-MD", "-MF", base + ".d", "-I", inc,
        "-include", build.PCH, "-S", source, "-o", base + ".s"]
    out, rc = compile_in_sandbox(argv, obj, a, sandbox, uid, deadline)
    out = out.replace(src + "/", "").replace(inc + "/", "")
    if rc != 0:
        raise build.BuildFailed(f"{base} does not compile:\n{out[-6000:]}")
    # 3: every file the compiler read was allowed (copied out of the sandbox's reach first)
    d = os.path.join(private, base + ".d")
    copy_regular(os.path.join(obj, base + ".d"), d)
    read = build.parse_deps(d)
    for dep in read:
        if not build.allowed_include(dep, [os.path.realpath(src), os.path.realpath(inc)], system_headers, std_dirs):
            raise build.BuildFailed(f"{base} includes {dep}: your files may include only the assignment's headers "
                                    f"({', '.join(a.student_headers)}) and the C++ standard library")
    argv = [build.CXX, "-c", "-x", "assembler", base + ".s", "-o", base + ".o", f"-Wa,--MD,{base}.ad"]
    out, rc = compile_in_sandbox(argv, obj, a, sandbox, uid, deadline)
    if rc != 0:
        own = build.own_assembler_messages(out, [base + ".s", source]).replace(src + "/", "")
        raise build.BuildFailed(f"{base} compiles, but its assembly does not assemble (inline assembly?):\n"
                                f"{own[-4000:]}")
    ad = os.path.join(private, base + ".ad")
    try:
        copy_regular(os.path.join(obj, base + ".ad"), ad)
    except OSError:
        raise build.BuildFailed(f"{base}: the assembler left no list of the files it read, so what it read cannot "
                                f"be checked")
    # its input, and the source's name as GCC's `.file` gives it (its base name: nothing there)
    allowed = set(read) | {os.path.realpath(os.path.join(obj, n)) for n in (base + ".s", base)}
    for dep in build.parse_deps(ad, cwd=obj):
        if dep not in allowed:
            raise build.BuildFailed(f"{base} makes the assembler read {dep} (.incbin or .include in inline "
                                    f"assembly): your files may read nothing at compile time but the assignment's "
                                    f"headers and the C++ standard library")
    o = os.path.join(private, base + ".o")
    copy_regular(os.path.join(obj, base + ".o"), o)
    return o


def course_objects(a, suites, cache, cflags):
    """The given code, the test main and the tests, compiled as the grader (cached). The
    common files (the test main, the channel, crash reports) see only common/, so their
    objects are the same for every assignment and compile once, not once per assignment."""
    return compile_course(a, a.given_sources() + a.test_sources(suites), cache, cflags)


def compile_course(a, sources, cache, cflags):
    base = ["-std=c++20", "-O2"] + cflags
    own = base + [f"-I{d}" for d in a.test_include_dirs()]
    common = base + [f"-I{os.path.join(a.course_dir, 'common')}"]
    shared = {a.common(f) for f in manifest.COMMON_SOURCES + manifest.WORKER_COMMON_SOURCES}
    return [cache.compile(s, common if s in shared else own) for s in sources]


def worker_objects(a, cache, cflags):
    """A judge outside: the worker's main, the given code and crash reports (cached)."""
    return compile_course(a, a.worker_sources(), cache, cflags)


def remote_objects(a, cache, cflags):
    """A judge outside: the calls to the worker that the judge links in the student's place."""
    return compile_course(a, a.remote_sources(), cache, cflags)


def in_process_objects(a, suites, cache, cflags):
    """The tests as a student's `meson test` links them (for --keep): theirs, in-process."""
    return course_objects(a, suites, cache, cflags)


def warm(a, suites, opts):
    """Compiles the course's side of an assignment (and its precompiled student headers)
    into opts.cache_dir ahead of grading."""
    cflags, _ = build.dplab_flags(opts.pkg_config_path)
    cache = build.Cache(opts.cache_dir, a.course_dir)
    scratch = build.private_dir("dplab-warm-")
    try:
        build.stage_headers(a, cache, [f[2:] for f in cflags if f.startswith("-I")],
                            [f for f in cflags if f.startswith("-D")], scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    objects = course_objects(a, suites, cache, cflags)
    if a.judge == "outside":
        objects += worker_objects(a, cache, cflags) + remote_objects(a, cache, cflags)
    return objects


def compile_in_sandbox(argv, cwd, a, sandbox, uid, deadline):
    """Compiles as the sandbox's user. The limit is CPU time (the compiler's processes each
    get compile_timeout_s of it): what a compile costs, whatever else the machine runs. The
    wall clock only guards against a compiler that waits on something: it may use what is
    left of the grade's budget, and at least compile_timeout_s."""
    cpu_limit = a.limits["compile_timeout_s"]
    limits = dict(a.limits, memory_mib=max(a.limits["memory_mib"], 2048), cpu_s=cpu_limit, processes=32,
                  file_mib=256)
    guard = max(cpu_limit, deadline - time.monotonic())
    proc = subprocess.Popen(argv, cwd=cwd, env=sandbox.env(cwd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=sandbox.preexec(uid, limits))
    sandbox.tracked.add(proc.pid)
    try:
        out, _ = proc.communicate(timeout=guard)
    except subprocess.TimeoutExpired:
        sandbox.end_run(proc, uid)
        raise build.BuildFailed(f"compiling went on for {guard:.0f} s without using up its CPU time: the compiler "
                                f"was waiting (an include of something that never ends?)")
    sandbox.end_run(proc, uid)
    text = out.decode("utf-8", "replace")[-20000:]
    # the compiler proper (cc1plus) got SIGXCPU, and its driver names the signal (strsignal's words)
    if proc.returncode != 0 and "CPU time limit exceeded" in text:
        raise build.BuildFailed(f"compiling used more than {cpu_limit} s of CPU time (the limit): an include of "
                                f"something endless, or templates or constexpr loops that never finish?")
    return text, proc.returncode



def copy_regular(src, dst):
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f, open(dst, "wb") as g:
        g.write(f.read(256 << 20))
