"""verdicts.py — a failed test, said in words a reader can act on (the grader's side of the
report).

Each failure becomes one kind (an assertion, an exception in the reader's code, not implemented
yet, a missing name, a time-out, a crash, a file that would not import) with a message, the line
of the reader's code at fault when there is one, and the line of the test that failed.
"""

from __future__ import annotations

import linecache
import traceback
from pathlib import Path

import remote


def skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def describe_failure(excinfo, item, during: str, timeout: float) -> dict:
    """Sort a failure into the few kinds a reader meets, each with a message in plain words."""
    e = excinfo.value
    info = (
        getattr(e, "learner", None) if isinstance(getattr(e, "learner", None), dict) else None
    )
    frames = (info or {}).get("frames") or []
    where = {k: frames[-1].get(k) for k in ("file", "line", "code")} if frames else {}
    if isinstance(e, remote.TimeLimitExceeded):
        return {"kind": "timeout", "message": f"did not finish within {timeout:g} s", **where}
    if isinstance(e, remote.LoadFailed):
        where = {k: e.info[k] for k in ("file", "line", "code") if e.info.get(k)}
        return {
            "kind": "load",
            "message": f"your file could not be imported: {e.info.get('message', '')}",
            **where,
        }
    if isinstance(e, remote.LearnerDied):
        return {"kind": "crash", "message": str(e)}
    if info is not None and info.get("missing"):
        return {
            "kind": "missing_name",
            "message": f"your file has no `{info['missing']}`: keep the names and signatures "
            "of the starter file",
        }
    if info is not None and isinstance(e, NotImplementedError):
        name = f"`{frames[-1].get('function')}`" if frames else "this part"
        return {
            "kind": "not_implemented",
            "message": f"{name} is not implemented yet (it raises NotImplementedError)",
            **where,
        }
    if info is not None:
        return {
            "kind": "exception",
            **where,
            "check": _test_line(e, item),
            "message": f"{info.get('call')} was expected to succeed, but your code raised "
            f"{type(e).__name__}: {e}",
        }
    if during == "setup":
        return {
            "kind": "setup",
            "message": f"the test could not be prepared: {type(e).__name__}: {e}",
        }
    if isinstance(e, AssertionError):
        return {
            "kind": "assertion",
            "message": str(e).strip() or "assertion failed",
            "check": _test_line(e, item),
        }
    return {
        "kind": "exception",
        "check": _test_line(e, item),
        "message": f"checking your result raised {type(e).__name__}: {e} (is the returned "
        "value of the right type?)",
    }


def _test_line(e: BaseException, item) -> str:
    """The line of the test that failed (the failing check), for plain asserts and helper calls
    alike."""
    test_file = str(Path(str(item.fspath)).resolve())
    line = ""
    for frame in traceback.extract_tb(e.__traceback__):
        if str(Path(frame.filename).resolve()) == test_file:
            last = max(frame.lineno, getattr(frame, "end_lineno", None) or frame.lineno)
            lines = [
                linecache.getline(frame.filename, n).strip()
                for n in range(frame.lineno, last + 1)
            ]
            line = " ".join(lines) if lines and lines[0] else (frame.line or "").strip()
    return line.replace("( ", "(").replace(" )", ")")
