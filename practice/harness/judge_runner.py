"""judge_runner.py — the judge's side of a run: a fresh copy, the test process, its signed
results.

`run_tests` snapshots the trusted tree (tree.py), writes it to a new temp folder, and starts the
grader there (grader.py: pytest with judge_plugin). The grader's only way to report is a pipe it
inherits and no other process holds, one signed line per event (the key travels on a second
pipe). This side reads the lines as they come and acts as a watchdog: a test that outlives its
time limit by GRACE seconds gets the whole process group killed. Afterwards it stops anything
left running, verifies the copy and the real tree against the snapshot (putting back whatever
changed), and removes the temp folder, also when it is interrupted or its own parent dies.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import oskit
from protocol import (
    DIGEST_ENV,
    EVENTS_FD_ENV,
    FILE_ENV,
    GRACE,
    JUDGE_PID_ENV,
    KEY_FD_ENV,
    PRELOAD_ENV,
    REPO,
    REPO_ENV,
    STACK_WAIT,
    TARGETS_ENV,
    TIMEOUT_ENV,
    import_timeout,
)
from tree import Snapshot, TreeReport

IMPORTING = "importing your file"
TEMP_PREFIX = "minillm-judge-"
# seconds without any event while no test runs: the grader is stuck, not the reader's code
IDLE_LIMIT = 300.0


@dataclass
class Outcome:
    """What one run reported: the tests it found, one result per test that ran, and the tree's
    state."""

    collected: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    load_error: dict | None = None
    finished: bool = False  # pytest reached its end (it may still have failed tests)
    problems: list[str] = field(
        default_factory=list
    )  # errors of the judge or the tests, not the reader's
    sandbox: dict = field(default_factory=dict)
    tree: TreeReport | None = None
    forged: bool = False  # a line on the results channel was not signed by the test process

    def for_problem(self, slug: str, target: str | None = None) -> list[dict]:
        return [
            r
            for r in self.results
            if r["problem"] == slug and (target is None or r.get("target") == target)
        ]

    def merge(self, other: Outcome) -> None:
        self.collected += other.collected
        self.results += other.results
        self.problems += other.problems
        self.finished = self.finished and other.finished
        self.sandbox = self.sandbox or other.sandbox
        self.load_error = self.load_error or other.load_error
        self.forged = self.forged or other.forged


class Grader:
    """One test process and what it has reported so far."""

    def __init__(
        self, copy: Path, folders: list[str], timeout: float, env: dict, index: int = 0
    ):
        self.timeout, self.key, self.seq = timeout, secrets.token_bytes(32), 0
        events_r, events_w = os.pipe()
        key_r, key_w = os.pipe()
        os.write(key_w, self.key)
        os.close(key_w)
        env = {**env, EVENTS_FD_ENV: str(events_w), KEY_FD_ENV: str(key_r)}
        practice = copy / "practice"
        cmd = [
            sys.executable,
            "-I",
            str(practice / "harness" / "grader.py"),
            *[str(practice / "problems" / f) for f in folders],
            "-c",
            str(practice / "pytest.ini"),
            "--rootdir",
            str(practice / "problems"),
            "-q",
            "--tb=no",
            "-p",
            "no:logging",
            "--assert=plain",  # the plugin reports failures: pytest's own
            # tracebacks and assert rewriting would only cost seconds (the tests use grading's
            # checks)
            "--basetemp",
            str(copy / f"pytest-tmp-{index}"),
        ]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            cmd,
            cwd=copy,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=(events_w, key_r),
            start_new_session=True,
        )
        os.close(events_w)
        os.close(key_r)
        self.events, self.pending = events_r, b""
        self.outcome, self.running, self.since, self.killed = (
            Outcome(),
            None,
            time.monotonic(),
            False,
        )
        self.phase = "setup"
        self.last_event = time.monotonic()

    def read(self) -> bool:
        """Take what the pipe holds; False once it is closed."""
        chunk = os.read(self.events, 1 << 16)
        if not chunk:
            return False
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            self.handle(line)
        return True

    def handle(self, line: bytes) -> None:
        self.last_event = time.monotonic()
        try:
            seq, mac, payload = line.decode().split("\t", 2)
            good = hmac.compare_digest(
                mac, hmac.new(self.key, f"{seq}\t{payload}".encode(), "sha256").hexdigest()
            )
            event = json.loads(payload) if good and int(seq) == self.seq + 1 else None
        except (ValueError, UnicodeDecodeError):
            event = None
        if not isinstance(event, dict) or self.outcome.forged:
            self.outcome.forged = True  # nothing after a forged line counts either
            return
        self.seq += 1
        kind = event.pop("event", None)
        if kind in (
            "start",
            "load_start",
        ):  # a test's setup (which may import the file), or the import itself
            self.running, self.since, self.phase = (
                event.get("test", IMPORTING),
                time.monotonic(),
                "setup",
            )
        elif kind == "call":  # the test itself: its own time limit, from now
            self.since, self.phase = time.monotonic(), "call"
        elif kind in ("result", "load_ok", "load_error"):
            self.running = None
        if kind == "collected":
            self.outcome.collected = event.get("tests", [])
        elif kind == "result":
            self.outcome.results.append(event)
        elif kind == "load_error":
            self.outcome.load_error = event
        elif kind == "sandbox":
            self.outcome.sandbox = event
        elif kind == "finish":
            self.outcome.finished = True
        elif kind == "collect_error":
            self.outcome.problems.append(
                "pytest could not collect "
                f"{event.get('where')}:\n{_tail(str(event.get('message')))}"
            )

    def overdue(self) -> bool:
        now = time.monotonic()
        if self.running is None:
            return now - self.last_event > IDLE_LIMIT
        limit = self.timeout if self.phase == "call" else import_timeout(self.timeout)
        return now - self.since > limit + STACK_WAIT + GRACE

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def finish(self) -> Outcome:
        self.proc.wait()
        os.close(self.events)
        out = self.outcome
        if self.running not in (None, IMPORTING):  # the process ended in the middle of a test
            kind, message = (
                ("timeout", f"did not finish within {self.timeout:g} s; the judge stopped it")
                if self.killed
                else (
                    "crash",
                    "the test process died during this test (exit code "
                    f"{self.proc.returncode})",
                )
            )
            problem, _, name = self.running.partition("/")
            out.results.append(
                {
                    "test": self.running,
                    "problem": problem,
                    "name": name.split("::")[-1],
                    "target": "file",
                    "outcome": "failed",
                    "kind": kind,
                    "message": message,
                    "hint": "",
                }
            )
        elif self.running == IMPORTING:
            out.load_error = {
                "kind": "timeout" if self.killed else "exception",
                "message": "importing the file did not finish; the judge stopped it"
                if self.killed
                else "the test process died while importing the file (exit code "
                f"{self.proc.returncode})",
            }
        elif out.load_error is None and not (
            out.finished and self.proc.returncode in (0, 1, 2)
        ):
            self.log.seek(0)
            out.problems.append(
                f"the test process stopped unexpectedly (exit code {self.proc.returncode}); "
                f"its last output:\n{_tail(self.log.read().decode('utf-8', 'replace'))}"
            )
        self.log.close()
        return out


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _stop_on_signal(signum, frame):
    raise KeyboardInterrupt


def remove_stale_copies() -> None:
    """Temp folders of judges that were killed before they could clean up (their pid is
    gone)."""
    for folder in Path(tempfile.gettempdir()).glob(TEMP_PREFIX + "*"):
        try:
            pid = int((folder / "judge.pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):
            continue


def run_tests(
    folders: list[Path],
    timeout: float,
    file: Path | None = None,
    targets: str | None = None,
    preload: list[str] = (),
    parallel: int = 1,
) -> Outcome:
    """pytest over the problem folders in fresh copies of the trusted tree; the real tree
    verified after."""
    remove_stale_copies()
    snapshot = Snapshot(REPO)
    copy = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    previous = {s: signal.signal(s, _stop_on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    graders: list[Grader] = []
    outcome = Outcome()
    try:
        (copy / "judge.pid").write_text(str(os.getpid()))
        snapshot.write_to(copy)
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PRACTICE_", "PYTEST_"))
        }
        env.update(
            {
                TIMEOUT_ENV: str(timeout),
                PRELOAD_ENV: ",".join(preload),
                JUDGE_PID_ENV: str(os.getpid()),
                REPO_ENV: str(REPO),
                DIGEST_ENV: snapshot.digest,
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.setdefault(
            "OMP_NUM_THREADS", "1"
        )  # the tensors are tiny; threads would only fight over the cores
        # Chapter 11's kernels are graded on CPU tensors, so Triton runs them in its
        # interpreter, GPU or not; the variable must be in the environment before the reader's
        # file imports triton (it is read at @triton.jit).
        env["TRITON_INTERPRET"] = "1"
        if file is not None:
            env[FILE_ENV] = str(file.resolve())
        if targets is not None:
            env[TARGETS_ENV] = targets
        names = [Path(f).name for f in folders]
        groups = [names[i::parallel] for i in range(min(parallel, len(names)))] or [[]]
        graders = [Grader(copy, group, timeout, env, i) for i, group in enumerate(groups)]
        _watch(graders)
        outcome.finished = True
        for grader in graders:
            outcome.merge(grader.finish())
    finally:
        for grader in graders:
            grader.kill()
            if grader.proc.poll() is None:
                grader.proc.wait()
        # whatever a reader's process left behind came back to us (subreaper)
        oskit.kill_descendants()
        outcome.tree = verify_trees(
            snapshot, copy, could_write=outcome.sandbox.get("mode") != "namespaces"
        )
        shutil.rmtree(copy, ignore_errors=True)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return outcome


def verify_trees(snapshot: Snapshot, copy: Path, could_write: bool) -> TreeReport:
    """The copy must be untouched; the real tree is put back only if the code under test could
    write to it
    (in the namespace sandbox it could not, so a change there is someone's edit, and stays)."""
    copy_changes = [f"(the judge's copy) {p}" for p in snapshot.differences(copy)]
    if could_write:
        report = snapshot.verify(REPO)
    else:
        report = TreeReport(
            len(snapshot.files), snapshot.digest, elsewhere=snapshot.differences(REPO)
        )
    report.changed += copy_changes
    return report


def _watch(graders: list[Grader]) -> None:
    open_ = {g.events: g for g in graders}
    while open_:
        ready, _, _ = select.select(list(open_), [], [], 0.05)
        for fd in ready:
            if not open_[fd].read():
                del open_[fd]
        for grader in list(open_.values()):
            if grader.overdue():
                grader.killed = True
                grader.kill()
