"""results.py: Gradescope's results.json, and the closing line a student reads.

results.json (https://gradescope-autograders.readthedocs.io, "Specification"): the score
(out of 100: every assignment's points add up to 100), execution_time in seconds, an
overall output, stdout_visibility "hidden" (the console is the grader's, not the
student's), and one entry per test with name, score, max_score, status, output (capped)
and visibility: "visible" for the visible tests, the assignment's hidden_visibility
("after_due_date" unless assignment.json says "hidden") for the others. The file is
written next to its place and renamed over it, so a link planted there is replaced,
never followed.
Read next: ../dplab_course.py (the commands).
"""
import json
import os
import tempfile

MAX_TEST_OUTPUT = 6000


def total(results):
    got = sum(r["score"] for r in results)
    most = sum(r["max_score"] for r in results) or 1
    return got, most, round(100.0 * got / most, 1)


def gradescope(results, assignment, seconds):
    got, most, score = total(results)
    tests = []
    for r in results:
        output = r["output"]
        if len(output) > MAX_TEST_OUTPUT:
            output = output[:MAX_TEST_OUTPUT] + "\n(feedback cut here)"
        tests.append({"name": r["name"], "score": r["score"], "max_score": r["max_score"], "status": r["status"],
                      "output": output, "output_format": "text",
                      "visibility": "visible" if r.get("visible") else assignment.hidden_visibility})
    return {"score": score, "execution_time": int(round(seconds)), "output": f"{got} of {most} points",
            "output_format": "text", "stdout_visibility": "hidden", "visibility": "visible", "tests": tests}


def write_json(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".results-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def closing_line(results, suites):
    got, most, score = total(results)
    if suites == ["visible"]:
        return (f"visible tests: {got} of {most} points; the hidden tests run when graded "
                f"(this is not your score)")
    return f"score: {score:g} / 100 ({got} of {most} points)"
