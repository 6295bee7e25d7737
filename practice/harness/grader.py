"""grader.py — the test process `judge.py` starts: pytest with the judge's plugin, from a fresh
copy.

    python -I <copy>/practice/harness/grader.py <pytest arguments>

Before pytest starts, the process makes itself non-dumpable (other processes of the user cannot
open its /proc files: the results pipe, the signing key), asks for SIGTERM when the judge dies,
and becomes a subreaper, so whatever the reader's code leaves running comes back to it and is
stopped. If the judge was killed, it also does the judge's last job: the real tree back as it
was (from this copy, if the copy is still the snapshot), and the copy removed.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # this copy's harness/ and minillm/ come first

import oskit  # noqa: E402
from protocol import DIGEST_ENV, JUDGE_PID_ENV, REPO_ENV  # noqa: E402


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
        if judge and os.getppid() != int(judge):
            clean_up_for_the_judge()


def clean_up_for_the_judge() -> None:
    """The judge was killed before it could clean up: put the real tree back from this copy,
    remove the copy."""
    from tree import Snapshot

    copy = HERE.parents[1]
    if not (copy / "judge.pid").is_file():
        return  # not a judge's copy: never delete anything else
    plugin = sys.modules.get("judge_plugin")
    could_write = getattr(getattr(plugin, "LEARNERS", None), "mode", None) != "namespaces"
    snapshot = Snapshot(copy)
    if (
        could_write
        and os.environ.get(REPO_ENV)
        and snapshot.digest == os.environ.get(DIGEST_ENV)
    ):
        snapshot.verify(
            Path(os.environ[REPO_ENV])
        )  # the replaced versions are kept in a temp folder
    shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
