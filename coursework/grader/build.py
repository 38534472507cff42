"""build.py: from a student's files to a test program, without trusting the files.

  1. The student-facing headers (assignment.json's student_headers, and every library
     header they include) are copied into a folder of their own: the student's files are
     compiled against that folder only, never the course folder or the library's sources.
  2. The student's files are copied in (regular files only: a symlink to the hidden tests
     is refused) and compiled in the sandbox, as its unprivileged user, with a timeout:
     to assembly first, then assembled (grade.compile_student_file).
  3. Every file the compiler read (its -MD list) must be one of those headers, the
     student's own files or the C and C++ standard library's headers; every file the
     assembler read (its --MD list: an .incbin or .include of inline assembly) must be the
     assembly itself or one of those.
  4. symbols.py checks what the objects call and define.
  5. The given code, the tests and the test main compile as the grader, in a cache kept
     between grades (an object is reused while its source, flags and headers are the same),
     and are linked before the student's objects; for an assignment judged outside (hw1,
     grade.build_program) the tests link calls to a worker instead, and the student's
     objects go into the worker, after its main and the given code.
Read next: symbols.py, sandbox.py, runner.py.
"""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile

CXX = os.environ.get("CXX", "c++")
MAX_SOURCE_BYTES = 1 << 20


class BuildFailed(Exception):
    """The submission does not build: the message is for the student."""


def run_quiet(argv, timeout=300, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def dplab_flags(pkg_config_path):
    env = dict(os.environ)
    if pkg_config_path:
        env["PKG_CONFIG_PATH"] = pkg_config_path + os.pathsep + env.get("PKG_CONFIG_PATH", "")
    r = run_quiet(["pkg-config", "--cflags", "--libs", "dplab"], env=env)
    if r.returncode != 0:
        raise SystemExit("dplab-course: error: pkg-config cannot find dplab: install it (meson install "
                         "-C build) or set DPLAB_COURSE_PKG_CONFIG_PATH to build/meson-uninstalled\n" + r.stderr)
    words = r.stdout.split()
    cflags = [w for w in words if w.startswith(("-I", "-D", "-std", "-f", "-pthread"))]
    libs = [w for w in words if w not in cflags or w in ("-pthread", "-fopenmp")]
    return cflags, libs


def parse_deps(path, cwd=None):
    """The files of a Make-style dependency list (-MD), with escaped spaces; a relative
    path is taken from cwd (the folder the compiler ran in), else from ours."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    deps = []
    for rule in text.split("\n"):
        if ":" not in rule:
            continue
        body = rule.split(": ", 1)[1] if ": " in rule else ""
        word = ""
        i = 0
        while i < len(body):
            c = body[i]
            if c == "\\" and i + 1 < len(body) and body[i + 1] == " ":
                word += " "
                i += 2
                continue
            if c.isspace():
                if word:
                    deps.append(word)
                word = ""
            else:
                word += c
            i += 1
        if word:
            deps.append(word)
    return [os.path.realpath(os.path.join(cwd, d) if cwd else d) for d in deps]


def own_assembler_messages(text, own):
    """What GNU as said about the student's own files (`own`: their assembly, and the source
    it came from, to which GCC's line markers attribute inline assembly), and nothing it said
    about another file: an .include of a file that is not assembly prints that file's lines."""
    kept, left_out = [], 0
    for line in text.splitlines():
        if any(line.startswith(o + ":") for o in own):
            kept.append(line)
        elif line.strip() and not line.endswith("Assembler messages:"):
            left_out += 1
    if left_out:
        kept.append(f"({left_out} line(s) about other files left out: your code may not make the assembler read "
                    f"files)")
    return "\n".join(kept)


_digests = {}


def digest(path):
    """sha1 of a file's content, once per grader process."""
    if path not in _digests:
        with open(path, "rb") as f:
            _digests[path] = hashlib.sha1(f.read()).hexdigest()
    return _digests[path]


def compiler_id():
    return run_quiet([CXX, "--version"]).stdout.split("\n")[0]


class Cache:
    """Objects (and header lists) of trusted sources, reused while every file they read has
    the same content. Paths inside the course folder are kept relative to it, so a copy of
    the course (a Gradescope package) can use a cache filled from the original."""

    def __init__(self, folder, course_dir=None):
        self.dir = folder
        self.course = os.path.realpath(course_dir) if course_dir else None
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            os.chmod(folder, 0o700)
        self.compiler = compiler_id()

    def portable(self, text):
        return text.replace(self.course, "@COURSE@") if self.course else text

    def local(self, text):
        return text.replace("@COURSE@", self.course) if self.course else text

    def key(self, *parts):
        h = hashlib.sha256(self.compiler.encode())
        for p in parts:
            h.update(b"\0" + (p if isinstance(p, bytes) else self.portable(str(p)).encode()))
        return h.hexdigest()[:40]

    def state(self, paths):
        return [[self.portable(p), digest(p)] for p in paths]

    def valid(self, meta_path):
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            for path, sha in meta["deps"]:
                if digest(self.local(path)) != sha:
                    return None
            return meta
        except (OSError, ValueError, KeyError):
            return None

    def compile(self, source, flags, timeout=300):
        with open(source, "rb") as f:
            content = f.read()
        key = self.key(os.path.realpath(source), content, " ".join(flags))
        obj, meta = os.path.join(self.dir, key + ".o"), os.path.join(self.dir, key + ".json")
        if os.path.exists(obj) and self.valid(meta):
            return obj
        tmp = f"{obj}.{os.getpid()}.tmp"
        r = run_quiet([CXX, "-c", source, "-o", tmp, "-MD", "-MF", tmp + ".d"] + flags, timeout=timeout)
        if r.returncode != 0:
            raise SystemExit(f"dplab-course: error: the course's own {source} does not compile:\n"
                             + (r.stdout + r.stderr)[-4000:])
        deps = parse_deps(tmp + ".d")
        os.unlink(tmp + ".d")
        with open(meta + ".tmp", "w") as f:
            json.dump({"deps": self.state(deps)}, f)
        os.replace(tmp, obj)  # atomic: two graders sharing the cache are safe
        os.replace(meta + ".tmp", meta)
        return obj


STUDENT_FLAGS = ["-std=c++20", "-O2", "-g1", "-pthread"]  # -g1: lines for crash reports
PCH = "dplab_student.h"  # every student header, precompiled: half a student compile's time


def stage_key(assignment, cache, include_dirs, defines):
    """The staged headers' cache key, and the include roots, shortest first (the first
    that holds a header names it: "framework/tensor/tensor.h", not "tensor/tensor.h").
    The key hashes (sha256) what the staging depends on, in an order of its own: never a
    set's, which changes with PYTHONHASHSEED and would stage (and precompile) the headers
    afresh in every grade."""
    roots = sorted({os.path.realpath(d) for d in include_dirs}, key=lambda d: (len(d), d))
    key = cache.key("stage", os.path.realpath(assignment.dir), *assignment.student_headers, *roots,
                    *STUDENT_FLAGS, *defines)
    return key, roots


def stage_headers(assignment, cache, include_dirs, defines, out_dir):
    """Puts the student-facing headers, everything they include from the library, and their
    precompiled form (PCH, used with -include) into out_dir. Returns the system headers
    among them (allowed to the student's files too). The staged folder is made once per
    cache and linked (else copied) into each grade's."""
    key, roots = stage_key(assignment, cache, include_dirs, defines)
    hw_dir = os.path.realpath(assignment.dir)
    names = assignment.student_headers
    staged_dir = os.path.join(cache.dir, "stage-" + key)
    meta_path = staged_dir + ".json"
    meta = cache.valid(meta_path)
    if not meta or not os.path.isfile(os.path.join(staged_dir, PCH + ".gch")):
        tmp_dir = f"{staged_dir}.{os.getpid()}.tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        os.makedirs(tmp_dir)
        header = os.path.join(tmp_dir, PCH)
        with open(header, "w") as f:
            f.write("// every header of the assignment, precompiled (dplab-course)\n" +
                    "".join(f'#include "{n}"\n' for n in names))
        r = run_quiet([CXX, "-std=c++20", "-M", "-MF", header + ".d", "-I", hw_dir] +
                      [f"-I{d}" for d in roots] + ["-x", "c++", header])
        if r.returncode != 0:
            raise SystemExit(f"dplab-course: error: {assignment.name}'s student_headers do not compile:\n"
                             + r.stderr[-3000:])
        deps = [d for d in parse_deps(header + ".d") if d != os.path.realpath(header)]
        os.unlink(header + ".d")
        staged, system = [], []
        for d in deps:
            root = hw_dir if d.startswith(hw_dir + "/") else next((r for r in roots if d.startswith(r + "/")), None)
            if root:  # the shortest root: "framework/tensor/tensor.h", not "tensor/tensor.h"
                rel = os.path.relpath(d, root)
                staged.append(rel)
                os.makedirs(os.path.dirname(os.path.join(tmp_dir, rel)), exist_ok=True)
                shutil.copyfile(d, os.path.join(tmp_dir, rel))
            else:
                system.append(d)
        r = run_quiet([CXX] + STUDENT_FLAGS + defines + ["-I", tmp_dir, "-x", "c++-header", header,
                                                        "-o", header + ".gch"])
        if r.returncode != 0:
            raise SystemExit(f"dplab-course: error: precompiling {assignment.name}'s headers failed:\n"
                             + r.stderr[-3000:])
        meta = {"deps": cache.state(deps), "staged": staged + [PCH, PCH + ".gch"], "system": system}
        shutil.rmtree(staged_dir, ignore_errors=True)
        os.replace(tmp_dir, staged_dir)
        with open(meta_path + ".tmp", "w") as f:
            json.dump(meta, f)
        os.replace(meta_path + ".tmp", meta_path)
    for rel in meta["staged"]:
        src, dst = os.path.join(staged_dir, rel), os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.stat(src).st_mode & 0o777 != 0o644 and os.stat(src).st_uid == os.geteuid():
            os.chmod(src, 0o644)  # the grader's, read-only to the sandbox
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    for folder, dirs, _ in os.walk(out_dir):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o755)
    return set(meta["system"])


def find_in_submission(student_dir, name):
    """name at the top of student_dir, else the one file of that name in its subfolders
    (Gradescope keeps the folders a student uploads); links are never followed."""
    top = os.path.join(student_dir, name)
    if os.path.lexists(top):
        return top
    found = []
    for root, dirs, files in os.walk(student_dir):  # os.walk does not follow links to folders
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__MACOSX"]
        if name in files:
            found.append(os.path.join(root, name))
    if len(found) > 1:
        rel = ", ".join(os.path.relpath(f, student_dir) for f in found[:5])
        raise BuildFailed(f"your submission holds {len(found)} files named {name} ({rel}): submit one")
    return found[0] if found else top


def copy_submission(assignment, student_dir, dest):
    """The student's files, each a regular file (never a link) of sane size, into dest."""
    out = []
    for name in assignment.student_files:
        path = find_in_submission(student_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise BuildFailed(f"{name} is missing: the assignment expects your {name} in {student_dir}")
        except OSError:
            raise BuildFailed(f"{name} is not a regular file (a link?): submit the file itself")
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise BuildFailed(f"{name} is not a regular file: submit the file itself")
            data = f.read(MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            raise BuildFailed(f"{name} is larger than {MAX_SOURCE_BYTES >> 20} MiB")
        target = os.path.join(dest, name)
        with open(target, "wb") as f:
            f.write(data)
        os.chmod(target, 0o644)
        out.append(target)
    return out


def standard_library_dirs():
    """The compiler's own header folders (libstdc++, its builtins, libc): what any C++
    file may include besides the assignment's headers."""
    r = run_quiet([CXX, "-std=c++20", "-xc++", "-E", "-v", "/dev/null"])
    dirs, inside = [], False
    for line in r.stderr.splitlines():
        if line.startswith("#include <...> search starts here"):
            inside = True
        elif line.startswith("End of search list"):
            break
        elif inside:
            dirs.append(os.path.realpath(line.strip()))
    return dirs


def allowed_include(path, sandbox_dirs, system_files, std_dirs):
    if any(path.startswith(d + "/") for d in sandbox_dirs) or path in system_files:
        return True
    for d in std_dirs:
        if not path.startswith(d + "/"):
            continue
        rel = path[len(d) + 1:]
        if "/c++/" in d + "/" or "/gcc/" in d:
            return True  # libstdc++ and the compiler's own headers
        # libc: /usr/include/stdio.h, sys/..., bits/..., the kernel's types
        if "/" not in rel or rel.split("/")[0] in ("bits", "sys", "gnu", "asm", "asm-generic", "linux"):
            return True
    return False


def link(objects, libs, out, timeout=180):
    r = run_quiet([CXX, "-o", out] + objects + libs + ["-pie"], timeout=timeout)
    if r.returncode != 0:
        return (r.stdout + r.stderr)[-6000:]
    return ""


def private_dir(prefix, parent=None):
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(d, 0o700)
    return d
