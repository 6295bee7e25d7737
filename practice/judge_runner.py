"""judge_runner.py — run an exercise's tests in a child pytest process and collect what happened.

The child loads judge_plugin.py, which writes one JSON line per event (a test started, a result, the
reader's file failed to import...). This side reads the lines as they come and acts as a watchdog:
if one test outlives its time limit (the plugin's own alarm could not interrupt it, e.g. inside a
long C call), the whole process group is killed and that test is reported as timed out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PRACTICE = Path(__file__).resolve().parent
REPO = PRACTICE.parent
PROBLEMS = PRACTICE / "problems"
GRACE = 5.0  # extra seconds before the watchdog kills a test the in-process time limit could not stop
IMPORTING = "importing your file"


@dataclass
class Outcome:
    """What one pytest run reported: the tests it found and one result per test that ran."""

    collected: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    load_error: dict | None = None
    finished: bool = False  # pytest reached its end (it may still have failed tests)
    problems: list[str] = field(default_factory=list)  # errors of the judge or the tests, not the reader's

    def for_problem(self, slug: str) -> list[dict]:
        return [r for r in self.results if r["problem"] == slug]



def run_tests(folders: list[Path], timeout: float, file: Path | None = None, target: str | None = None,
              preload: list[str] = ()) -> Outcome:
    """pytest over the problem folders in a child process, with the plugin that records what happens."""
    fd, results_path = tempfile.mkstemp(prefix="judge-", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ, PRACTICE_RESULTS=results_path, PRACTICE_TIMEOUT=str(timeout), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(PRACTICE), str(REPO), os.environ.get("PYTHONPATH", "")]))
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # nbval and friends cost seconds to import and are not needed
    env.setdefault("OMP_NUM_THREADS", "1")  # the tensors are tiny; threads would only fight over the cores
    env["PRACTICE_PRELOAD"] = ",".join(preload)
    env.pop("PYTEST_ADDOPTS", None)  # the judge's own options only
    env.pop("PRACTICE_FILE", None)
    env.pop("PRACTICE_TARGET", None)
    if file is not None:
        env["PRACTICE_FILE"] = str(file.resolve())
    if target is not None:
        env["PRACTICE_TARGET"] = target
    cmd = [sys.executable, "-m", "pytest", *map(str, folders), "-p", "judge_plugin", "-c", str(PRACTICE / "pytest.ini"),
           "--rootdir", str(PROBLEMS), "-q"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=os.name == "posix")
        try:
            outcome, running, killed = _watch(proc, results_path, timeout)
        except BaseException:  # Ctrl-C: the child runs in its own session, so stop it here
            _kill(proc)
            os.unlink(results_path)
            raise
        log.seek(0)
        raw = log.read().decode("utf-8", "replace")
    os.unlink(results_path)
    if running not in (None, IMPORTING):  # the process ended in the middle of a test
        if killed:
            kind, message = "timeout", f"did not finish within {timeout:g} s; the judge stopped it"
        else:
            kind, message = "crash", (f"the test process died during this test (exit code {proc.returncode}): "
                                      "Python crashed, or the code called os._exit()")
        outcome.results.append({"test": running, "problem": running.split("/")[0], "name": running.split("::")[-1],
                                "outcome": "failed", "kind": kind, "message": message, "hint": ""})
    elif outcome.load_error is None and not (outcome.finished and proc.returncode in (0, 1, 2)):
        outcome.problems.append(f"the test process stopped unexpectedly (exit code {proc.returncode}); "
                                f"its last output:\n{_tail(raw)}")
    return outcome


def _watch(proc: subprocess.Popen, results_path: str, timeout: float) -> tuple[Outcome, str | None, bool]:
    """Wait for pytest, reading its events as they come; kill it if one test outlives its time limit.

    Returns what was reported, the test (or IMPORTING) still running when the process ended, and
    whether the watchdog killed it.
    """
    outcome, offset, running, since = Outcome(), 0, None, 0.0
    while True:
        finished = proc.poll() is not None
        with open(results_path, encoding="utf-8") as f:
            f.seek(offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            event = json.loads(line)
            kind = event.pop("event")
            if kind in ("start", "load_start"):
                running, since = event.get("test", IMPORTING), time.monotonic()
            elif kind in ("result", "load_ok", "load_error"):
                running = None
            if kind == "collected":
                outcome.collected = event["tests"]
            elif kind == "result":
                outcome.results.append(event)
            elif kind == "load_error":
                outcome.load_error = event
            elif kind == "finish":
                outcome.finished = True
            elif kind == "collect_error":
                outcome.problems.append(f"pytest could not collect {event['where']}:\n{_tail(event['message'])}")
        if finished:
            if running == IMPORTING:
                outcome.load_error = {"kind": "exception", "message": f"the test process died while importing "
                                      f"the file (exit code {proc.returncode}): did it call os._exit()?"}
            return outcome, running, False
        limit = max(timeout, 30.0) if running == IMPORTING else timeout  # as in judge_plugin
        if running is not None and time.monotonic() - since > limit + GRACE:
            _kill(proc)
            if running == IMPORTING:
                outcome.load_error = {"kind": "timeout", "message": "importing the file did not finish; the judge stopped it"}
            return outcome, running, True
        time.sleep(0.05)


def _kill(proc: subprocess.Popen) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:  # it ended on its own meanwhile
        pass
    proc.wait()


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
