#!/usr/bin/env python3
"""make_starter.py REFERENCE STARTER: the starter file a student gets, made from the reference.

Every region between a line "// BEGIN ASSIGNMENT: what to write" and a line
"// END ASSIGNMENT" is the student's part. The starter keeps everything else and puts in
its place a TODO comment saying what to write; inside a function (an indented BEGIN line)
it also throws, so the starter compiles and every test fails with "not implemented yet: ..."
instead of crashing. The build runs this, so a starter can never drift from its reference.
"""
import re
import sys

BEGIN = re.compile(r"^(\s*)// BEGIN ASSIGNMENT: (.*)$")
END = re.compile(r"^\s*// END ASSIGNMENT\s*$")


def strip(lines, where):
    out, region = [], None
    for number, line in enumerate(lines, 1):
        begin = BEGIN.match(line)
        if begin and region is None:
            region = (begin.group(1), begin.group(2).strip(), number)
            continue
        if END.match(line):
            if region is None:
                sys.exit(f"{where}:{number}: END ASSIGNMENT without a BEGIN")
            indent, what, _ = region
            out.append(f"{indent}// TODO (you): {what}\n")
            if indent:  # inside a function: compile, and fail when called
                text = what.replace("\\", "\\\\").replace('"', '\\"')
                out.append(f'{indent}throw std::logic_error("not implemented yet: {text}");\n')
            region = None
            continue
        if region is None:
            out.append(line)
    if region is not None:
        sys.exit(f"{where}:{region[2]}: BEGIN ASSIGNMENT without an END")
    if not any(BEGIN.match(l) for l in lines):
        sys.exit(f"{where}: no BEGIN ASSIGNMENT region: nothing for a student to write")
    return out


def main():
    reference, starter = sys.argv[1], sys.argv[2]
    with open(reference) as f:
        lines = f.readlines()
    out = strip(lines, reference)
    header = "// Starter generated from the reference by coursework/make_starter.py.\n"
    if any("throw std::logic_error" in l for l in out) and not any("<stdexcept>" in l for l in out):
        header += "#include <stdexcept>\n"
    with open(starter, "w") as f:
        f.write(header + "".join(out))


if __name__ == "__main__":
    main()
