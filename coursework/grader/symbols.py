"""symbols.py: what the student's objects may call and define.

Calls: every undefined symbol of the student's objects (nm) must match the assignment's
allow-list (assignment.json "symbols": "allow", regular expressions over the demangled
name without its parameters, and groups "@name" from common/symbols.json). A symbol that is
not allowed gets the words of the first "deny" entry that matches it ("hw3 may not call
dplab::parallel::ring_all_reduce: write the ring yourself"), else the assignment's
"otherwise". Symbols the student's own files define are allowed.
Definitions: the student's files may define strong symbols only in the assignment's
namespace (hw3::, not its grading parts), and weak ones (template instances, inline
functions) of the standard library and the library besides: so they cannot replace a
function of the tests, of the library or of libc (write(), malloc()). Their weak copies
lose to the tests' own, which are linked first (build.py); but not to the libraries'
(fmt, libstdc++, dplab: a program's own definition wins over a shared library's, and an
archive's member is never loaded for a symbol already defined), so a weak definition
outside the namespace must be one the compiler emitted from a header: in a COMDAT group
(where every inline function and template instance goes; __attribute__((weak)) and
.weak do not put it there), and of a name that none of the libraries the program links
defines (fmt::vformat, std::chrono::steady_clock::now: a header only declares those).
System calls: the objects may not contain a syscall instruction (inline assembly).
Read next: build.py.
"""
import hashlib
import json
import os
import re
import subprocess
import tempfile

SPECIAL = ("typeinfo name for ", "typeinfo for ", "vtable for ", "VTT for ", "construction vtable for ",
           "guard variable for ", "TLS init function for ", "TLS wrapper function for ",
           "reference temporary ", "transaction clone for ")
THUNKS = ("non-virtual thunk to ", "virtual thunk to ", "covariant return thunk to ")
OPERATOR_CHARS = set("<>=!+-*/%&|^~,")
QUALIFIERS = (" const", " volatile", " &&", " &", " noexcept")
INTERNAL = ("grading", "observe", "detail_grading")  # namespaces of the tests inside hwN::


def _skip_operator(text, i):
    """i at "operator": the index after the operator's name (operator<<, operator new[])."""
    j = i + len("operator")
    for word in (" new[]", " delete[]", " new", " delete", "()", "[]", "->*", "->", " \"\" "):
        if text.startswith(word, j):
            return j + len(word)
    k = j
    while k < len(text) and k - j < 3 and text[k] in OPERATOR_CHARS:
        k += 1
    return k if k > j else j  # a conversion operator: "operator bool" keeps its space


def name_of(demangled):
    """"void std::vector<int>::push_back(int const&) const" -> "std::vector<int>::push_back"."""
    text = demangled.strip()
    for thunk in THUNKS:
        if text.startswith(thunk):
            text = text[len(thunk):]
    if text.startswith(SPECIAL):
        return text
    changed = True
    while changed:
        changed = False
        for q in QUALIFIERS:
            if text.endswith(q):
                text, changed = text[:-len(q)], True
    if text.endswith(")"):  # the parameter list: its matching "("
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i]
                break
    # a return type ends at the last space outside <> and () that belongs to no operator name
    depth, cut, i = 0, -1, 0
    while i < len(text):
        if text.startswith("operator", i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            i = _skip_operator(text, i)
            continue
        c = text[i]
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == " " and depth == 0 and not text.startswith("<", i + 1):
            cut = i
        i += 1
    name = text[cut + 1:] if cut >= 0 else text
    return re.sub(r"\[abi:\w+\]", "", name)


def _nm(obj, *args, demangle=True):
    r = subprocess.run(["nm", "-p", *(["-C"] if demangle else []), *args, obj], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"nm {obj}: {r.stderr}")
    out = []
    for line in r.stdout.splitlines():
        parts = line.split(None, 2) if line[:1] != " " else ["", *line.split(None, 1)]
        if len(parts) == 3:
            out.append((parts[1], parts[2]))
    return out


def _comdat_symbols(obj):
    """The names of obj's symbols defined in a section of a COMDAT group (readelf -g, -s)."""
    r = subprocess.run(["readelf", "-W", "-g", "-s", obj], capture_output=True, text=True, timeout=60)
    grouped, names, in_group = set(), set(), False
    for line in r.stdout.splitlines():
        if line.startswith("COMDAT group section"):
            in_group = True
        elif in_group and re.match(r"^\s+\[\s*\d+\]\s+\S", line):
            grouped.add(int(re.match(r"^\s+\[\s*(\d+)\]", line).group(1)))
        elif in_group and "[Index]" not in line:
            in_group = False
        m = re.match(r"^\s*\d+:\s+[0-9a-f]+\s+\S+\s+\w+\s+(?:GLOBAL|WEAK|UNIQUE)\s+\w+\s+(\d+)\s+(\S+)", line)
        if m and int(m.group(1)) in grouped:
            names.add(m.group(2))
    return names


def library_files(libs, cxx="c++"):
    """The libraries and archives a program linked with `libs` reads (the linker's --trace)."""
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([cxx, "-shared", "-o", os.path.join(d, "probe.so"), *libs, "-Wl,--trace"],
                           capture_output=True, text=True, timeout=120)
    files = []
    for line in (r.stdout + r.stderr).splitlines():
        line = line.strip()
        if os.path.isabs(line) and not line.endswith(".o") and os.path.isfile(line) and line not in files:
            files.append(line)
    return files


def library_definitions(libs, cache_dir=None, cxx="c++"):
    """{mangled name: the library's file name} for every symbol the linked libraries define
    strongly (a shared library's dynamic symbols, an archive's members'), kept in cache_dir while
    the libraries' paths, sizes and times are the same."""
    files = library_files(libs, cxx)
    stamp = json.dumps([[f, os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files])
    key = hashlib.sha256(stamp.encode()).hexdigest()[:40]
    path = os.path.join(cache_dir, f"libdefs-{key}.json") if cache_dir else None
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    defined = {}
    for lib in files:
        args = ["--defined-only", "--extern-only"] if lib.endswith(".a") else ["-D", "--defined-only"]
        try:
            found = _nm(lib, *args, demangle=False)
        except RuntimeError:  # a linker script (libc.so): the files it names are in the list too
            continue
        for kind, name in found:
            # a library's weak symbols are copies from headers (template instances, inline
            # functions: libgloo.so exports std::shared_ptr's), as the student's are
            if kind not in ("U", "w", "v", "W", "V", "u"):
                defined.setdefault(name.split("@")[0], os.path.basename(lib))
    if path:  # a temporary file of this grade's own: grades that share the cache write at once
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f"libdefs-{key}.", suffix=".tmp")
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide it from a cache copied for another user
        with os.fdopen(fd, "w") as f:
            json.dump(defined, f)
        os.replace(tmp, path)
    return defined


def load_groups(course_dir):
    with open(os.path.join(course_dir, "common", "symbols.json")) as f:
        return json.load(f)["groups"]


class Rules:
    def __init__(self, assignment, groups):
        spec = assignment.symbols
        self.short = assignment.short
        self.namespace = assignment.namespace
        self.allow = []
        for entry in spec.get("allow", []):
            if entry.startswith("@"):
                if entry[1:] not in groups:
                    raise KeyError(f"{assignment.name}: no symbol group '{entry}' in common/symbols.json")
                self.allow += groups[entry[1:]]
            else:
                self.allow.append(entry)
        self.allow_re = [re.compile(p) for p in self.allow]
        self.deny = [(re.compile(d["match"]), d["why"]) for d in spec.get("deny", [])]
        self.otherwise = spec.get("otherwise", "it is not among what the assignment gives you")
        ns = re.escape(self.namespace)
        internal = "|".join(INTERNAL)
        self.own = re.compile(rf"^((typeinfo name|typeinfo|vtable|VTT|guard variable) for )?"
                              rf"{ns}::(?!(?:{internal})::)")

    def check_call(self, name):
        if any(p.fullmatch(name) for p in self.allow_re):
            return ""
        for pattern, why in self.deny:  # why this one is not allowed, in the assignment's words
            if pattern.match(name):
                return f"{self.short} may not call {name}: {why}"
        return f"{self.short} may not call {name}: {self.otherwise}"

    def check_definition(self, kind, name):
        if self.own.match(name):
            return ""
        weak = kind in ("W", "V", "u", "w", "v")
        if weak and re.match(r"^((typeinfo name|typeinfo|vtable|VTT|guard variable) for )?"
                             r"(std::|__gnu_cxx::|dplab::|fmt::|DW\.ref\.__gxx_personality_v0)", name):
            return ""
        return (f"your files define {name}: they may define only {self.namespace}'s own functions "
                f"(put helpers in namespace {self.namespace} or an unnamed namespace)")


def syscall_sites(obj):
    r = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", obj], capture_output=True, text=True,
                       timeout=60)
    sites, function = [], "?"
    for line in r.stdout.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            function = m.group(1)
        elif re.search(r"\t(syscall|sysenter|int\s+\$0x80)\b", line):
            sites.append(function)
    return sites


def replaces(kind, mangled, demangled, comdat, library):
    """Why a definition outside the assignment's namespace replaces one of the program's
    libraries' ("" when it is only a copy the compiler emitted from a header)."""
    name = name_of(demangled)
    if mangled in library:
        return (f"your files define {name}, which {library[mangled]} defines: the tests would call yours in "
                f"its place (a function of the library is called, never written again)")
    if kind in ("W", "V", "w", "v") and mangled not in comdat:
        return (f"your files define {name} as a weak symbol (__attribute__((weak)), .weak): the tests would "
                f"call yours in its place; put helpers in your namespace or an unnamed namespace")
    return ""


def check_objects(rules, objects, display_names, library=None):
    """The problems with the student's objects, one sentence each ([] when none); library:
    library_definitions() of what the program links."""
    problems, defined, undefined = [], set(), []
    for obj in objects:
        comdat = _comdat_symbols(obj)
        raw = _nm(obj, "--defined-only", "--extern-only", demangle=False)
        for (kind, name), (_, mangled) in zip(_nm(obj, "--defined-only", "--extern-only"), raw):
            n = name_of(name)
            defined.add(n)
            why = rules.check_definition(kind, n)
            if not why and not rules.own.match(n):
                why = replaces(kind, mangled, name, comdat, library or {})
            if why:
                problems.append(f"{display_names[obj]}: {why}")
        undefined += [(obj, name_of(name)) for _, name in _nm(obj, "--undefined-only")]
        for function in syscall_sites(obj):
            problems.append(f"{display_names[obj]}: {function} makes a system call itself (inline assembly): "
                            f"the assignment is written in C++ against what it gives you")
    seen = set()
    for obj, name in undefined:
        if name in defined or name in seen:
            continue
        seen.add(name)
        why = rules.check_call(name)
        if why:
            problems.append(why)
    return problems
