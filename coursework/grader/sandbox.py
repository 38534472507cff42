"""sandbox.py: how the submission's processes run (the compiler on its files, its tests).

Every such process runs in a session of its own with limits (address space, CPU time, file
size, processes, core files off), and, when the grader is root (Gradescope, CI):
  - as an unprivileged user id of its own, one per concurrent test, that owns nothing of
    the grader's (no_new_privs: no setuid program gives the privilege back);
  - in a mount namespace where the course folder (reference, hidden tests), the grader's
    private work folder and cache, and any path in DPLAB_COURSE_HIDE are covered by an
    empty read-only tmpfs, and /tmp, /var/tmp and /dev/shm are fresh ones (its own folders
    are under /run/dplab-course). Where the kernel refuses namespaces,
    the grader insists instead that those paths be unreadable to other users.
When a test ends, nothing of it may live on: as root, every process of its user id is
killed (kill(-1) run as that user: atomic against fork); otherwise its process group is,
and the grader, a child subreaper, kills every orphan that was reparented to it.
Read next: runner.py (the tests), build.py (the compiler).
"""
import ctypes
import fcntl
import os
import pwd
import signal
import tempfile
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
SYS_TGKILL = 234  # x86-64
# Where the sandbox's folders go when the grader is root: not under /tmp, which each test
# gets afresh (so a submission cannot leave files there for a later test or grade).
SANDBOX_ROOT = "/run/dplab-course"
# How long kill_uid waits for SIGKILLed processes to disappear before it calls the
# sandbox broken (a process in an uninterruptible wait): a guard, never a verdict.
KILL_GUARD_S = 60.0


def sandbox_parent():
    if os.geteuid() == 0 and os.path.isdir("/run"):
        os.makedirs(SANDBOX_ROOT, mode=0o711, exist_ok=True)
        os.chmod(SANDBOX_ROOT, 0o711)
        return SANDBOX_ROOT
    return None

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(Exception):
    pass


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _uid_of_proc(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _ppid_of_proc(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        return int(text[text.rindex(")") + 2:].split()[1])
    except (OSError, ValueError):
        return None


def _all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def outermost(paths):
    """The paths, less those inside another one (covering the outer one covers them)."""
    out = []
    for p in sorted(set(paths), key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


class Sandbox:
    def __init__(self, hide=(), slots=2):
        self.root = os.geteuid() == 0
        self.hide = outermost(os.path.realpath(p) for p in hide if p and os.path.exists(p))
        self.tracked = set()  # our own children: never mistaken for orphans
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.uids, self._locks = [], []
        self.namespaces = False
        if self.root:
            self._take_uids(slots + 1)  # one per concurrent test, and one for the compiler
            self.namespaces = self._probe_namespaces()
            if not self.namespaces:
                self._require_private(self.hide)

    # ---- user ids: a range that no account and no process uses, locked per grader ----
    def _take_uids(self, count):
        base = int(os.environ.get("DPLAB_COURSE_UID_BASE", "61000"))
        lock_dir = os.path.join(tempfile.gettempdir(), "dplab-course-uids")
        os.makedirs(lock_dir, mode=0o700, exist_ok=True)
        st = os.lstat(lock_dir)
        if st.st_uid != 0 or st.st_mode & 0o077:
            raise SandboxError(f"{lock_dir} must be a folder of root's with mode 700")
        busy = {_uid_of_proc(p) for p in _all_pids()}
        for uid in range(base, base + 2000):
            if len(self.uids) == count:
                return
            try:
                pwd.getpwuid(uid)
                continue  # an account: not ours to use
            except KeyError:
                pass
            fd = os.open(os.path.join(lock_dir, str(uid)), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # another grader's
            if uid in busy:  # a leftover of a grader that died: it goes now
                self.kill_uid(uid)
            self.uids.append(uid)
            self._locks.append(fd)
        raise SandboxError(f"found no {count} free user ids from {base} (set DPLAB_COURSE_UID_BASE)")

    def _probe_namespaces(self):
        """Whether this kernel lets us cover paths in a mount namespace of the child's."""
        if os.environ.get("DPLAB_COURSE_NO_NAMESPACES"):
            return False
        pid = os.fork()
        if pid == 0:
            try:
                self._enter_namespace()
                os._exit(0)
            except BaseException:
                os._exit(1)
        return os.waitpid(pid, 0)[1] == 0

    def _require_private(self, paths):
        """Without namespaces the hidden paths must be closed to other users by their modes:
        some folder on the way (or the path itself) must not let others pass (o-x)."""
        for path in paths:
            p = path
            while not (os.path.isdir(p) and not os.stat(p).st_mode & 0o001):
                if p == os.path.dirname(p):
                    raise SandboxError(
                        f"{path} is readable by other users and this kernel refuses mount "
                        f"namespaces: `chmod 700` a folder above it (run_autograder does)")
                p = os.path.dirname(p)

    # ---- the child's side: runs after fork, before exec ----
    def _enter_namespace(self):
        _check(_libc.unshare(CLONE_NEWNS), "unshare")
        _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
        for path in self.hide:
            if os.path.isdir(path):
                _check(_libc.mount(b"none", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                   b"size=4k,mode=000"), f"cover {path}")
            else:  # a file: an empty one in its place
                _check(_libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None), f"cover {path}")
        # A /proc of its own that shows only this user's processes: a test (or hw1's worker)
        # cannot read other tests' command lines, a judge's, or other grades'. "invisible" is
        # known only to kernels (5.8+) where each proc mount has its own options; an older
        # kernel refuses it, and /proc stays as it was rather than hidepid changing the
        # host's own /proc.
        _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"hidepid=invisible")
        # fresh ones: nothing left for the next grade, nor shared with a process of another user
        # (hw3's ranks): the folders every user may write to (/run/lock too, /var/lock's target)
        for shared in ("/dev/shm", "/tmp", "/var/tmp", "/run/lock"):
            if os.path.isdir(shared) and not self.below(SANDBOX_ROOT, shared):
                _check(_libc.mount(b"none", shared.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=256m,mode=1777"),
                       f"a fresh {shared}")

    @staticmethod
    def below(path, folder):
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    def preexec(self, uid, limits, apart=False):
        """The function to run in the child (Popen's preexec_fn): the grader has no threads.
        apart: a network and IPC namespace of its own as well (hw3's ranks: no link to another
        rank but the broker's pipes, not even one through loopback or shared memory)."""
        import resource

        def setup():
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the grader died: so does this
            if self.root and self.namespaces:
                self._enter_namespace()
                if apart:
                    _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare(network, IPC)")
            mib = 1 << 20
            resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mib"] * mib,) * 2)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_mib"] * mib,) * 2)
            resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 2))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
            nproc = limits["processes"]
            if not self.root:  # the limit counts every process of the user, the grader's too
                nproc += sum(1 for p in _all_pids() if _uid_of_proc(p) == os.getuid())
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
            if self.root:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
        return setup

    def env(self, home, extra=None):
        """A clean environment: nothing of the grader's (tokens, paths) leaks into a test."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
               "MALLOC_ARENA_MAX": "4"}
        env.update(extra or {})
        return env

    def give(self, path, uid, mode=0o700):
        """Makes path (a folder of the grader's) the sandbox user's own."""
        if self.root:
            os.chown(path, uid, uid)
        os.chmod(path, mode)

    # ---- ending everything a run left behind ----
    def kill_uid(self, uid):
        """As root: kills every process of uid, then reaps what was reparented to us. A
        SIGKILLed process is gone once the kernel has run its exit, which on a busy machine
        (a fork bomb's hundreds at once) takes a while: the guard is generous, the loop ends
        as soon as none is left."""
        guard = time.monotonic() + KILL_GUARD_S
        pause = 0.005
        while True:
            pid = os.fork()
            if pid == 0:
                try:
                    os.setgroups([])
                    os.setresgid(uid, uid, uid)
                    os.setresuid(uid, uid, uid)
                    os.kill(-1, signal.SIGKILL)  # every process this user may signal, not itself
                except BaseException:
                    pass
                os._exit(0)
            os.waitpid(pid, 0)
            self.reap_orphans(kill=True)
            alive = [p for p in _all_pids() if _uid_of_proc(p) == uid and not self._zombie(p)]
            if not alive:
                return
            if time.monotonic() > guard:
                raise SandboxError(f"processes of user {uid} survive SIGKILL for {KILL_GUARD_S:.0f} s: {alive[:5]}")
            time.sleep(pause)
            pause = min(2 * pause, 0.1)

    @staticmethod
    def _zombie(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
            return text[text.rindex(")") + 2] == "Z"
        except (OSError, ValueError):
            return True  # gone

    def reap_orphans(self, kill=True):
        """Kills and reaps every child of ours we did not start: descendants of a test whose
        parent died (we are their subreaper). Repeats until none is left."""
        me = os.getpid()
        for _ in range(500):
            orphans = [p for p in _all_pids() if p not in self.tracked and _ppid_of_proc(p) == me]
            if not orphans:
                return
            for p in orphans:
                if kill:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    os.waitpid(p, 0)
                except ChildProcessError:
                    pass

    def end_run(self, proc, uid):
        """After a run: its process group, its user's processes (root) and every orphan go."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.wait()
        self.tracked.discard(proc.pid)
        if self.root:
            self.kill_uid(uid)
        self.reap_orphans(kill=True)

    def sample_stacks(self, pid):
        """Asks every thread of a running test for its stack (crash.cpp answers SIGUSR1)."""
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return
        for tid in tids:
            _libc.syscall(SYS_TGKILL, pid, tid, signal.SIGUSR1)

    def close(self):
        for fd in self._locks:
            os.close(fd)
        self._locks = []
