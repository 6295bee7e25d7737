"""protocol.py — what the judge, the test process and the reader's process agree on, in one
place.

Three processes grade an exercise:

    judge.py (the command line)          snapshots practice/ and minillm/, copies them to a
    fresh
      |                                  temp folder, reads the results, verifies the tree after
      +-- grader (pytest, grader.py)     runs the tests from that copy: references, comparisons,
            |                            verdicts. The reader's code never runs here.
            +-- zygote (sandbox.py)      forked off the grader with torch imported; forks one
                  |                      process per exercise (sandboxed where the OS allows)
                  +-- learner            imports the reader's files and answers calls over a
                  socket

The grader sends its verdicts to the judge over a pipe that no other process holds, each line
signed with a key the judge hands over on another pipe. Values cross the learner's socket as
data (wire.py, rpc.py), never as pickles, so the learner's only power is to return values.
"""

from __future__ import annotations

from pathlib import Path

PRACTICE = Path(__file__).resolve().parents[1]  # practice/harness/protocol.py -> practice/
REPO = PRACTICE.parent
PROBLEMS = PRACTICE / "problems"
WORKSPACE_ENV = "MINILLM_PRACTICE_WORKSPACE"  # the reader's folder (default practice/workspace)

# The files a verdict depends on: copied fresh for every run and verified byte for byte after
# it.
TRUSTED_DIRS = ("practice", "minillm")
UNTRUSTED_PARTS = ("workspace", "__pycache__", ".pytest_cache", ".hypothesis")

# ---------------------------------------------------------------- judge -> grader (environment)
FILE_ENV = "PRACTICE_FILE"  # `judge.py test`: the one file to grade
TARGETS_ENV = (
    "PRACTICE_TARGETS"  # `judge.py check`: "solution,starter,wrong" (the folder's own files)
)
TIMEOUT_ENV = "PRACTICE_TIMEOUT"  # seconds per test
PRELOAD_ENV = "PRACTICE_PRELOAD"  # modules the zygote imports before forking ("torch,minillm")
EVENTS_FD_ENV = "PRACTICE_EVENTS_FD"  # the pipe the grader writes signed events to
KEY_FD_ENV = "PRACTICE_KEY_FD"  # the pipe the grader reads its signing key from, once
JUDGE_PID_ENV = "PRACTICE_JUDGE_PID"  # the grader dies with this process
# the real tree, which a grader puts back from its copy if the judge was killed
REPO_ENV = "PRACTICE_REPO"
DIGEST_ENV = (
    "PRACTICE_TREE_DIGEST"  # the snapshot's digest: the copy is only trusted while it matches
)
SANDBOX_ENV = (
    "MINILLM_JUDGE_SANDBOX"  # "auto" (default): namespaces when the OS allows; "process": never
)

# ---------------------------------------------------------------- time limits (seconds)
DEFAULT_TIMEOUT = 10.0  # per test
IMPORT_TIMEOUT = 30.0  # importing the reader's file (at least the per-test limit)
GRACE = 5.0  # the judge's watchdog kills a grader whose test outlives its limit by this much
STACK_WAIT = (
    2.0  # at most this long the grader waits for a looping learner's stack before killing it
)

# ---------------------------------------------------------------- targets of `check`
SOLUTION, STARTER = "solution", "starter"
# practice/problems/<slug>/wrong/<mistake>.py: plausible wrong answers, each must fail
WRONG_DIR = "wrong"

# ---------------------------------------------------------------- limits on what crosses the
#   learner's socket
MAX_MESSAGE = 512 * 2**20  # bytes in one message
MAX_STDOUT = 4000  # characters of the reader's printing kept per test


def import_timeout(timeout: float) -> float:
    return max(timeout, IMPORT_TIMEOUT)
