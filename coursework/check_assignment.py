#!/usr/bin/env python3
"""check_assignment.py DPLAB_COURSE HW: what CI asserts about an assignment's grader.

  - the reference solution scores 100;
  - the untouched starter finishes (no hang, no crash of the grader) and scores 0 on every
    test that needs the student's code;
  - each deliberate mistake listed in assignment.json ("mistakes": the reference with one
    text replaced) scores below 100, and the feedback names the mistake (its "feedback" text).
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def grade(tool, hw, where, json_path):
    args = [sys.executable, tool, "grade", hw] + (["--reference"] if where is None else [where])
    run = subprocess.run(args + ["--json", json_path], capture_output=True, text=True, timeout=1500)
    print(run.stdout[-3000:], run.stderr[-2000:], flush=True)
    with open(json_path) as f:
        return json.load(f)


def main():
    tool, hw = sys.argv[1], sys.argv[2]
    course = os.environ["DPLAB_COURSE_DIR"]
    starters = os.environ["DPLAB_COURSE_STARTERS"]
    with open(os.path.join(course, hw, "assignment.json")) as f:
        manifest = json.load(f)
    problems = []
    with tempfile.TemporaryDirectory() as work:
        # the six grades below share the compiled tests and support code (fresh for this run)
        os.environ["DPLAB_COURSE_CACHE"] = os.path.join(work, "cache")
        result = grade(tool, hw, None, os.path.join(work, "reference.json"))
        if result["score"] != 100:
            problems.append(f"the reference scored {result['score']}, not 100")

        result = grade(tool, hw, os.path.join(starters, hw), os.path.join(work, "starter.json"))
        earned = [t["name"] for t in result["tests"] if t["score"] > 0]
        if earned:
            problems.append(f"the untouched starter earned points in: {earned}")
        if not any("not implemented yet" in t["output"] for t in result["tests"]):
            problems.append("the starter's feedback never says 'not implemented yet'")

        for mistake in manifest["mistakes"]:
            old, new = mistake["replace"]
            target = os.path.join(work, re.sub(r"\W+", "_", mistake["name"]))
            os.makedirs(target)
            for name in manifest["student_files"]:
                with open(os.path.join(course, hw, name)) as f:
                    text = f.read()
                if old in text:
                    text = text.replace(old, new)
                with open(os.path.join(target, name), "w") as f:
                    f.write(text)
            if not any(old in open(os.path.join(course, hw, n)).read() for n in manifest["student_files"]):
                problems.append(f"mistake '{mistake['name']}': its text is not in the reference")
                continue
            result = grade(tool, hw, target, target + ".json")
            feedback = "\n".join(t["output"] for t in result["tests"])
            print(f"mistake '{mistake['name']}': score {result['score']}")
            if result["score"] >= 100:
                problems.append(f"mistake '{mistake['name']}' scored {result['score']}")
            elif mistake["feedback"] not in feedback:
                problems.append(f"mistake '{mistake['name']}': the feedback does not say "
                                f"'{mistake['feedback']}':\n{feedback[:1500]}")
    for p in problems:
        print("PROBLEM:", p)
    print(f"{hw}: {'ok' if not problems else str(len(problems)) + ' problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
