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
lose to the tests' own, which are linked first (build.py).
System calls: the objects may not contain a syscall instruction (inline assembly).
Read next: build.py.
"""
import json
import os
import re
import subprocess

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


def _nm(obj, *args):
    r = subprocess.run(["nm", "-C", *args, obj], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"nm {obj}: {r.stderr}")
    out = []
    for line in r.stdout.splitlines():
        parts = line.split(None, 2) if line[:1] != " " else ["", *line.split(None, 1)]
        if len(parts) == 3:
            out.append((parts[1], parts[2]))
    return out


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


def check_objects(rules, objects, display_names):
    """The problems with the student's objects, one sentence each ([] when none)."""
    problems, defined, undefined = [], set(), []
    for obj in objects:
        for kind, name in _nm(obj, "--defined-only", "--extern-only"):
            n = name_of(name)
            defined.add(n)
            why = rules.check_definition(kind, n)
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
