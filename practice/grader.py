"""grader.py — the test process `judge.py` starts: pytest with the judge's plugin, from a fresh copy.

    python -I <copy>/practice/grader.py <pytest arguments>

Before pytest starts, the process makes itself non-dumpable (other processes of the user cannot
open its /proc files: the results pipe, the signing key), asks to be killed with the judge, and
becomes a subreaper, so whatever the reader's code leaves running comes back to it and is stopped.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this copy's practice/ and minillm/ come first

import oskit  # noqa: E402
from protocol import JUDGE_PID_ENV  # noqa: E402


def _stop(signum, frame):
    raise KeyboardInterrupt  # pytest ends the session cleanly: learners stopped, zygote closed


def main() -> int:
    oskit.not_dumpable()
    oskit.become_subreaper()
    signal.signal(signal.SIGTERM, _stop)
    judge = os.environ.get(JUDGE_PID_ENV)
    oskit.die_with_parent(signal.SIGTERM, int(judge) if judge else None)
    import pytest

    try:
        return pytest.main(sys.argv[1:])
    finally:
        oskit.kill_descendants()


if __name__ == "__main__":
    sys.exit(main())
