"""judge_plugin.py — the pytest plugin `judge.py` runs the tests with (`-p judge_plugin`).

It turns pytest's reports into one JSON line per event in $PRACTICE_RESULTS, in words a reader can
act on: which test, passed or not, the failing check, expected vs got, the line of the reader's code
at fault, and the test's hint (its docstring). It also puts a time limit on every test: an endless
loop becomes a failed test, not a frozen terminal.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import linecache
import os
import signal
import threading
import traceback
from pathlib import Path

import pytest

import grading

RESULTS_ENV, TIMEOUT_ENV, PRELOAD_ENV = "PRACTICE_RESULTS", "PRACTICE_TIMEOUT", "PRACTICE_PRELOAD"


class TimeLimitExceeded(BaseException):
    """Raised inside a test when its time is up; a BaseException so `except Exception` cannot swallow it."""


def _emit(**event) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


def _timeout() -> float:
    return float(os.environ.get(TIMEOUT_ENV, "10"))


def _load_timeout() -> float:
    return max(_timeout(), 30.0)  # a first import may compile caches; an endless loop still ends here


class _time_limit:
    """SIGALRM-based limit (main thread, POSIX); elsewhere the judge's watchdog is the only limit."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self.armed:
            def on_alarm(signum, frame):
                raise TimeLimitExceeded()

            self.previous = signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


# ------------------------------------------------------------------ loading the reader's file


def pytest_sessionstart(session):
    """Import the reader's file first, so a syntax error or an import that never ends is reported as such."""
    chosen = os.environ.get(grading.FILE_ENV)
    if not chosen:
        return
    for heavy in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):  # the tests import them anyway;
        if importlib.util.find_spec(heavy) is not None:  # their import time is not the reader's
            importlib.import_module(heavy)
    _emit(event="load_start", file=chosen)
    try:
        with _time_limit(_load_timeout()):
            grading.load(chosen)
    except BaseException as e:  # noqa: BLE001 — whatever the file does, the reader gets a sentence
        _emit(event="load_error", **describe_load_error(e, chosen))
        pytest.exit("the file under test could not be imported", returncode=3)
    _emit(event="load_ok")


def describe_load_error(e: BaseException, file: str) -> dict:
    if isinstance(e, SyntaxError):
        where = {"file": e.filename or file, "line": e.lineno, "code": (e.text or "").rstrip("\n"),
                 "column": e.offset}
        return {"kind": "syntax", "message": f"{type(e).__name__}: {e.msg}", **where}
    where = learner_frame(e)
    if isinstance(e, TimeLimitExceeded):
        return {"kind": "timeout", "message": f"importing the file did not finish within {_load_timeout():g} s",
                **where}
    if isinstance(e, ImportError):
        return {"kind": "import", "message": f"{type(e).__name__}: {e}", **where}
    return {"kind": "exception", "message": f"{type(e).__name__}: {e}", **where}


def learner_frame(e: BaseException) -> dict:
    """The deepest line of the reader's own code in the exception's traceback, if any."""
    found = {}
    for frame in traceback.extract_tb(e.__traceback__):
        if str(Path(frame.filename).resolve()) in grading.learner_files:
            found = {"file": frame.filename, "line": frame.lineno, "code": (frame.line or "").strip()}
    return found


# ------------------------------------------------------------------ running and reporting tests


def pytest_collection_finish(session):
    _emit(event="collected", tests=[_test_id(item) for item in session.items])


def pytest_collectreport(report):
    if report.failed:
        _emit(event="collect_error", where=str(report.fspath), message=str(report.longrepr))


def pytest_runtest_logstart(nodeid, location):
    _emit(event="start", test=nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _time_limit(_timeout()):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        result = {"event": "result", "test": report.nodeid, **_test_id(item), "outcome": report.outcome,
                  "hint": inspect.cleandoc(item.function.__doc__ or "") if hasattr(item, "function") else "",
                  "seconds": round(call.duration, 3)}
        if report.skipped:
            result["message"] = _skip_reason(report)
        elif report.failed:
            result.update(describe_failure(call.excinfo, item, during=report.when))
            if result["kind"] == "timeout":  # the next tests would most likely loop too: fix this one first
                item.session.shouldstop = "a test ran out of time"
            result["stdout"] = report.capstdout[-2000:]
        _emit(**result)


def pytest_sessionfinish(session, exitstatus):
    _emit(event="finish", exitstatus=int(exitstatus))


def _test_id(item) -> dict:
    return {"problem": Path(str(item.fspath)).parent.name, "name": item.name}


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def describe_failure(excinfo, item, during: str) -> dict:
    """Sort a failure into the few kinds a reader meets, each with a message in plain words."""
    e = excinfo.value
    where = learner_frame(e)
    check = _test_line(e, item)
    if isinstance(e, TimeLimitExceeded):
        return {"kind": "timeout", "message": f"did not finish within {_timeout():g} s", **where}
    if isinstance(e, NotImplementedError) and where:
        name = _function_at(e) or "this part"
        return {"kind": "not_implemented", "message": f"{name} is not implemented yet (it raises NotImplementedError)",
                **where}
    if isinstance(e, AttributeError) and getattr(e, "name", None) and _is_learner_module(getattr(e, "obj", None)):
        return {"kind": "missing_name",
                "message": f"your file has no `{e.name}`: keep the names and signatures of the starter file"}
    if during == "setup":
        return {"kind": "setup", "message": f"the test could not be prepared: {type(e).__name__}: {e}"}
    if isinstance(e, AssertionError):
        return {"kind": "assertion", "message": str(e).strip() or "assertion failed", "check": check}
    if where:
        return {"kind": "exception", "message": f"your code raised {type(e).__name__}: {e}", **where}
    return {"kind": "exception", "check": check,
            "message": f"checking your result raised {type(e).__name__}: {e} (is the returned value of the right type?)"}


def _is_learner_module(obj) -> bool:
    file = getattr(obj, "__file__", None)
    return file is not None and str(Path(file).resolve()) in grading.learner_files


def _function_at(e: BaseException) -> str | None:
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if str(Path(f.filename).resolve()) in grading.learner_files]
    return f"`{frames[-1].name}`" if frames else None


def _test_line(e: BaseException, item) -> str:
    """The line of the test that failed (the failing check), for plain asserts and helper calls alike."""
    test_file = str(Path(str(item.fspath)).resolve())
    line = ""
    for frame in traceback.extract_tb(e.__traceback__):
        if str(Path(frame.filename).resolve()) == test_file:
            last = max(frame.lineno, getattr(frame, "end_lineno", None) or frame.lineno)
            lines = [linecache.getline(frame.filename, n).strip() for n in range(frame.lineno, last + 1)]
            line = " ".join(lines) if lines and lines[0] else (frame.line or "").strip()
    return line.replace("( ", "(").replace(" )", ")")
