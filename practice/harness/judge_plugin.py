"""judge_plugin.py — the pytest plugin of the grader (`-p judge_plugin` in practice/pytest.ini).

It gives the tests their `learner`: a proxy of the reader's file running in its own sandboxed
process (remote.py), one per file, restarted after a crash or a time-out. It puts a time limit
on every test, and it reports every event to the judge as one signed JSON line, in words a
reader can act on: which test, passed or not, the failing check, expected vs got, the line of
the reader's code at fault, and the test's hint (its docstring). In `check` mode it runs every
test once per target (solution, starter, each wrong answer), and stops a wrong answer at its
first failure.
"""

from __future__ import annotations

import ast
import hmac
import importlib
import importlib.util
import inspect
import json
import os
import re
from pathlib import Path

import pytest
import remote
from learners import RemoteLearner, Zygote
from protocol import (
    DEFAULT_TIMEOUT,
    EVENTS_FD_ENV,
    FILE_ENV,
    KEY_FD_ENV,
    PRELOAD_ENV,
    SOLUTION,
    TARGETS_ENV,
    TIMEOUT_ENV,
    WRONG_DIR,
    import_timeout,
)
from verdicts import describe_failure, skip_reason


class Events:
    """Signed JSON lines to the judge: `seq <tab> hmac-sha256 <tab> payload`."""

    def __init__(self):
        fd, key_fd = os.environ.get(EVENTS_FD_ENV), os.environ.get(KEY_FD_ENV)
        self.out = os.fdopen(int(fd), "w", buffering=1) if fd else None
        self.key = bytearray(
            64
        )  # a bytearray, so the zygote's copy can be wiped after the fork
        if key_fd:
            size = os.readv(int(key_fd), [self.key])
            del self.key[size:]
            os.close(int(key_fd))
        self.seq = 0

    def emit(self, **event) -> None:
        if self.out is None:
            return
        self.seq += 1
        payload = json.dumps(event)
        mac = hmac.new(self.key, f"{self.seq}\t{payload}".encode(), "sha256").hexdigest()
        self.out.write(f"{self.seq}\t{mac}\t{payload}\n")


EVENTS: Events | None = None


def emit(**event) -> None:
    if EVENTS is not None:
        EVENTS.emit(**event)


def timeout() -> float:
    return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))


# ---------------------------------------------------------------- the reader's processes


class Learners:
    """One sandboxed process at a time: the current exercise's, importing the files its tests
    grade."""

    def __init__(self):
        self.zygote: Zygote | None = None
        self.process: RemoteLearner | None = None
        self.exercise: str | None = None
        self.mode: str | None = (
            None  # the sandbox the reader's processes run in, once one started
        )
        self.modules: dict[
            str, object
        ] = {}  # file -> its module's proxy, in the running process
        self.load_errors: dict[str, remote.LoadFailed] = {}
        self.failed_targets: set[tuple[str, str]] = set()

    def start_zygote(self) -> Zygote:
        if self.zygote is None:
            default = "torch,minillm" if importlib.util.find_spec("torch") else ""
            preload = os.environ.get(PRELOAD_ENV, default).split(",")
            self.zygote = Zygote(
                [m for m in preload if m], forget=EVENTS.key if EVENTS else None
            )
            self.mode = self.zygote.mode
            emit(event="sandbox", mode=self.zygote.mode, why=self.zygote.why)
        return self.zygote

    def get(self, path: Path, exercise: str) -> tuple[RemoteLearner, object]:
        """The process and the module of `path`: a new process for a new exercise or after a
        crash or time-out."""
        key = str(path)
        if key in self.load_errors:
            raise self.load_errors[key]
        name = "learner_" + re.sub(r"\W", "_", f"{exercise}_{path.parent.name}_{path.stem}")
        alive = self.process is not None and self.process.alive and self.exercise == exercise
        try:
            if alive and key in self.modules:
                return self.process, self.modules[key]
            if alive:
                self.modules[key] = self.process.load_another(
                    path, name, import_timeout(timeout())
                )
                return self.process, self.modules[key]
            self.stop()
            self.process, self.exercise = (
                RemoteLearner(self.start_zygote(), path, name),
                exercise,
            )
            self.modules = {key: self.process.load(import_timeout(timeout()))}
            return self.process, self.modules[key]
        except remote.LoadFailed as e:
            self.load_errors[key] = e
            raise

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
        self.process, self.modules = None, {}

    def close(self) -> None:
        self.stop()
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None


LEARNERS = Learners()
CURRENT: list = [None]  # the learner of the running test, for its printed output


def target_path(folder: Path, target: str) -> Path:
    if target == "file":
        return Path(os.environ[FILE_ENV]).resolve()
    return (folder / f"{target}.py").resolve()


def targets_for(folder: Path) -> list[str] | None:
    """`check` mode: solution, starter, then every wrong answer of the folder; None
    otherwise."""
    wanted = os.environ.get(TARGETS_ENV)
    if not wanted or os.environ.get(FILE_ENV):
        return None
    out = []
    for target in wanted.split(","):
        if target == WRONG_DIR:
            out += [f"{WRONG_DIR}/{p.stem}" for p in sorted((folder / WRONG_DIR).glob("*.py"))]
        else:
            out.append(target)
    return out


def learner_for(request):
    """The `learner` fixture: the module proxy of the file this test grades."""
    folder = Path(str(request.fspath)).parent
    target = getattr(request, "param", "file" if os.environ.get(FILE_ENV) else SOLUTION)
    learner, module = LEARNERS.get(target_path(folder, target), folder.name)
    learner.mutable = dict(
        getattr(request.module, "MAY_CHANGE_IN_PLACE", {})
    )  # name -> position
    learner.printed = ""
    CURRENT[0] = learner
    return module


def source_under_test(request) -> tuple[Path, str]:
    """The file the `learner` fixture imported for this test, and its text: for tests that
    read how an answer is written (no loop over requests, one indexed write), not only what
    it returns."""
    callspec = getattr(request.node, "callspec", None)
    target = callspec.params.get("learner") if callspec else None
    if target is None:
        target = "file" if os.environ.get(FILE_ENV) else SOLUTION
    path = target_path(Path(str(request.fspath)).parent, target)
    return path, path.read_text(encoding="utf-8")


# ---------------------------------------------------------------- pytest hooks


def pytest_configure(config):
    global EVENTS
    if EVENTS is None:
        EVENTS = Events()


def pytest_generate_tests(metafunc):
    if "learner" in metafunc.fixturenames:
        targets = targets_for(Path(str(metafunc.definition.fspath)).parent)
        if targets:
            metafunc.parametrize("learner", targets, indirect=True, ids=targets)


def _target(item) -> str:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("learner", "file") if callspec else "file"


def _name(item) -> str:
    """The test's name without the target (check mode adds it to the parameters)."""
    target = _target(item)
    match = re.match(r"(.*?)\[(.*)\]$", item.name)
    if target == "file" or not match:
        return item.name
    rest = [p for p in match.group(2).split("-") if p != target]
    return match.group(1) + (f"[{'-'.join(rest)}]" if rest else "")


def catcher(folder: Path, target: str) -> str | None:
    """The test a wrong answer names as the one that catches it ("Caught by: test_x." in its
    docstring)."""
    if not target.startswith(WRONG_DIR + "/"):
        return None
    try:
        doc = (
            ast.get_docstring(ast.parse((folder / f"{target}.py").read_text(encoding="utf-8")))
            or ""
        )
    except (OSError, SyntaxError):
        return None
    match = re.search(r"^Caught by: (test_\w+)", doc, re.MULTILINE)
    return match.group(1) if match else None


def pytest_collection_modifyitems(session, config, items):
    """Each target's tests in file order; a wrong answer runs only the test it names as its
    catcher."""
    order, kept, dropped = {}, [], []
    for item in items:
        folder = Path(str(item.fspath)).parent
        targets = targets_for(folder) or ["file"]
        order[item.nodeid] = (
            folder.name,
            targets.index(_target(item)) if _target(item) in targets else 0,
        )
        wanted = catcher(folder, _target(item))
        (dropped if wanted and item.originalname != wanted else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = sorted(
        kept, key=lambda item: order[item.nodeid]
    )  # stable: file order within a target


def _test_id(item) -> dict:
    return {
        "problem": Path(str(item.fspath)).parent.name,
        "target": _target(item),
        "name": _name(item),
    }


def pytest_collection_finish(session):
    """Report the tests, then (`judge.py test`) import the reader's file: after the tests and
    conftest were
    imported, so nothing the file does at import can change them; a syntax error or an
    endless import is reported as such."""
    emit(event="collected", tests=[_test_id(item) for item in session.items])
    chosen = os.environ.get(FILE_ENV)
    if not chosen:
        return
    emit(event="load_start", file=chosen)
    try:
        LEARNERS.get(
            Path(chosen).resolve(),
            Path(session.config.args[0]).name if session.config.args else "",
        )
    except remote.LoadFailed as e:
        emit(event="load_error", **e.info)
        LEARNERS.close()
        pytest.exit("the file under test could not be imported", returncode=3)
    emit(event="load_ok")


def pytest_collectreport(report):
    if report.failed:
        emit(event="collect_error", where=str(report.fspath), message=str(report.longrepr))


def pytest_runtest_logstart(nodeid, location):
    emit(event="start", test=nodeid)


def pytest_runtest_setup(item):
    problem, target = _test_id(item)["problem"], _target(item)
    if target.startswith(WRONG_DIR + "/") and (problem, target) in LEARNERS.failed_targets:
        pytest.skip("not run: this wrong answer already failed a test")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    emit(event="call", test=item.nodeid)  # the judge's watchdog times the test from here
    remote.set_deadline(timeout())
    try:
        yield
    finally:
        remote.set_deadline(None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        result = {
            "event": "result",
            "test": report.nodeid,
            **_test_id(item),
            "outcome": report.outcome,
            "hint": inspect.cleandoc(item.function.__doc__ or "")
            if hasattr(item, "function")
            else "",
            "seconds": round(call.duration, 3),
        }
        if report.skipped:
            result["message"] = skip_reason(report)
        elif report.failed:
            result.update(
                describe_failure(call.excinfo, item, during=report.when, timeout=timeout())
            )
            LEARNERS.failed_targets.add((result["problem"], result["target"]))
            if result["kind"] == "timeout" and result["target"] == "file":
                item.session.shouldstop = (
                    "a test ran out of time"  # the next tests would most likely loop too
                )
            learner = CURRENT[0]
            result["stdout"] = learner.printed if learner is not None else ""
        emit(**result)


def pytest_sessionfinish(session, exitstatus):
    LEARNERS.close()
    emit(event="finish", exitstatus=int(exitstatus))
