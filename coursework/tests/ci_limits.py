"""ci_limits.py: the limits CI grades under (DPLAB_COURSE_LIMITS): an assignment's own, with
the wall-clock ones, which only guard against hangs, made GUARD_SCALE times as long.

CI grades two at a time beside the rest of the test suite, on a machine where a test's wall
time can be many times an idle machine's. There a guard that only stops hangs may be as long
as it likes, and no check reads a grade's seconds as a verdict. What is a verdict stays as
the grader has it: compile_timeout_s counts CPU time, which load does not stretch; a test
that sizes its work against a reference (hw3's library ring) asks for its own time at the
pace measured in the same run; and check_limits.py sets the very limits it tests.
Read next: check_assignment.py, check_limits.py.
"""
import json

GUARD_SCALE = 4
WALL_CLOCK_GUARDS = ("test_timeout_s", "hang_timeout_s", "paced_timeout_s", "budget_s")


def limits(assignment):
    """The assignment's limits with its wall-clock guards scaled for CI."""
    return {k: v * GUARD_SCALE if k in WALL_CLOCK_GUARDS else v for k, v in assignment.limits.items()}


def environ(env, assignment):
    """env with DPLAB_COURSE_LIMITS set to CI's limits for `assignment`."""
    return dict(env, DPLAB_COURSE_LIMITS=json.dumps(limits(assignment)))
