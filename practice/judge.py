#!/usr/bin/env python3
"""judge.py — practise by rebuilding the engine's pieces, graded on your machine.

    python practice/judge.py                 list the exercises and your progress
    python practice/judge.py start rmsnorm   copy the starter to practice/workspace/rmsnorm.py,
    show the task python practice/judge.py test rmsnorm    run the tests on your file (or: test
    rmsnorm path/to/file.py) python practice/judge.py hint rmsnorm    hints, when you are stuck
    python practice/judge.py solution rmsnorm python practice/judge.py check           every
    solution passes, every starter and wrong answer fails (CI) python practice/judge.py doctor
    what this machine can run

An exercise is named by its slug or by its number in book order (`start 1` is `start rmsnorm`).
Your code runs in a process of its own (a sandbox where the OS allows), which can only return
values: the tests, the comparisons and the verdict happen in another process, and the judge's
files are verified after every run. A syntax error, a failed import, an exception, an endless
loop or a crash is reported as such.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))  # the grader's machinery

import oskit
from exercises import (
    WORKSPACE,
    Exercise,
    UsageError,
    find,
    front_matter,
    load_exercises,
    missing_requirement,
    section,
    task_text,
)
from judge_check import cmd_check
from judge_report import Style, print_load_error, print_result, shown_path
from judge_runner import Outcome, run_tests
from protocol import DEFAULT_TIMEOUT, PROBLEMS

STATUS_FILE = WORKSPACE / ".status.json"


# ------------------------------------------------------------------ status of the reader's work


def read_status() -> dict:
    try:
        return json.loads(STATUS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def record_status(ex: Exercise, passed: int, total: int) -> None:
    status = read_status()
    status[ex.slug] = {"passed": passed, "total": total, "sha256": _digest(ex.workspace_file)}
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    STATUS_FILE.write_text(
        json.dumps(status, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def status_of(ex: Exercise, status: dict) -> str:
    if not ex.workspace_file.exists():
        return "not started"
    last = status.get(ex.slug)
    if not last or last.get("sha256") != _digest(ex.workspace_file):
        return "started"
    if last["total"] and last["passed"] == last["total"]:
        return "passed"
    return f"started, {last['passed']}/{last['total']} tests pass"


# ------------------------------------------------------------------ commands


def cmd_list(exercises: list[Exercise], args) -> int:
    status = read_status()
    print(f"{len(exercises)} exercises. Your files live in {shown_path(WORKSPACE)}/.\n")
    slug_w, title_w = max(len(e.slug) for e in exercises), max(len(e.title) for e in exercises)
    print(f"  {'#':>3}  {'exercise':<{slug_w}}  {'title':<{title_w}}  {'level':<6}  status")
    chapter = None
    for ex in exercises:
        if ex.chapter != chapter:
            chapter = ex.chapter
            print(f"  {Style.paint(chapter, '1')}")
        state = status_of(ex, status)
        painted = Style.paint(
            state, "32" if state == "passed" else "33" if state.startswith("started") else "2"
        )
        print(
            f"  {ex.number:>3}  {ex.slug:<{slug_w}}  {ex.title:<{title_w}}  "
            f"{ex.difficulty:<6}  {painted}"
        )
    print("\nStart one with:  python practice/judge.py start <number or name>")
    return 0


def cmd_start(exercises: list[Exercise], args) -> int:
    ex = find(exercises, args.id)
    print(Style.paint(f"#{ex.number} {ex.slug}", "1") + f" ({ex.chapter}, {ex.difficulty})\n")
    print(task_text(ex) + "\n")
    dest = ex.workspace_file
    if dest.exists():
        print(
            f"{shown_path(dest)} already exists: your work is kept as it is. (Delete it to "
            "start over.)"
        )
    else:
        WORKSPACE.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ex.folder / "starter.py", dest)
        print(f"Your starter file is {shown_path(dest)}.")
    print(f"Edit it, then run:  python practice/judge.py test {ex.slug}")
    return 0


def cmd_test(exercises: list[Exercise], args) -> int:
    ex = find(exercises, args.id)
    file = Path(args.file) if args.file else ex.workspace_file
    if not file.is_file():
        hint = (
            f"run `python practice/judge.py start {ex.slug}` first"
            if not args.file
            else "check the path"
        )
        raise UsageError(f"{shown_path(file)} does not exist: {hint}")
    record = file.resolve() == ex.workspace_file.resolve()
    why_not = missing_requirement(ex)
    if why_not:
        print(f"{ex.slug}: skipped on this machine: {why_not}")
        return 0
    print(
        Style.paint(f"#{ex.number} {ex.slug}", "1")
        + f" - {ex.title} - testing {shown_path(file)}\n"
    )
    try:  # a syntax error needs no test process to be found
        compile(file.read_bytes(), str(file), "exec")
    except SyntaxError as e:
        print_load_error(
            {
                "kind": "syntax",
                "message": f"{type(e).__name__}: {e.msg}",
                "line": e.lineno,
                "code": e.text or "",
                "column": e.offset,
            },
            file,
        )
        if record:
            record_status(ex, 0, 1)
        return 1
    except ValueError as e:  # e.g. a null byte: not Python source at all
        raise UsageError(f"{shown_path(file)} is not a Python source file: {e}") from None
    preload = ["torch", "minillm"] if {"torch", "cuda"} & set(ex.requires) else []
    outcome = run_tests([ex.folder], args.timeout, file=file, preload=preload)
    return report_test(ex, file, outcome, record)


def report_test(ex: Exercise, file: Path, outcome: Outcome, record: bool) -> int:
    tampered = print_tampering(outcome)
    if outcome.load_error:
        print_load_error(outcome.load_error, file)
        if record:
            record_status(ex, 0, max(1, len(outcome.collected)))
        return 1
    seen = {r["name"] for r in outcome.results}
    results = outcome.results + [
        {
            "name": c["name"],
            "outcome": "not run",
            "message": "not run: the run stopped at the failure above",
        }
        for c in outcome.collected
        if c["name"] not in seen
    ]
    todo = [r for r in results if r.get("kind") == "not_implemented"]
    missing = sorted({r["message"] for r in results if r.get("kind") == "missing_name"})
    if todo and len(todo) == len(results):
        names = sorted({r["message"].split(" is not")[0] for r in todo})
        print(
            "  Nothing implemented yet: every test stops at NotImplementedError in "
            f"{', '.join(names)}."
        )
        print(
            f"  Fill in the bodies in {shown_path(file)}; `python practice/judge.py start "
            f"{ex.slug}` shows the task."
        )
    elif missing and all(r.get("kind") in ("missing_name", "not_implemented") for r in results):
        for message in missing:  # one line per absent name instead of one per test
            print(f"  {Style.paint('FAIL', '31')}  {message}")
    else:
        for r in results:
            print_result(r)
    for problem in outcome.problems:
        print(Style.paint("\nThe test run did not complete:", "31"))
        print(problem)
    passed = sum(r["outcome"] == "passed" for r in results)
    total = len(results)
    if record:
        record_status(ex, 0 if tampered else passed, total)
    print()
    if total and passed == total and not outcome.problems and not tampered:
        print(Style.paint(f"All {total} tests pass. Well done!", "32"), end=" ")
        print(f"Compare with the reference: python practice/judge.py solution {ex.slug}")
        return 0
    print(
        f"{passed} of {total} tests pass. Fix the first failure, then run: python "
        f"practice/judge.py test {ex.slug}"
    )
    return 1


def print_tampering(outcome: Outcome) -> bool:
    """Say so when the run changed the judge's files (already put back) or forged its results;
    True if so."""
    tree, tampered = outcome.tree, False
    if outcome.forged:
        print(
            Style.paint(
                "The results channel carried lines the test process did not sign, so this run "
                "fails "
                "whatever they say.",
                "31",
            )
        )
        tampered = True
    if tree is not None and not tree.ok:
        print(
            Style.paint(
                "This run changed files the judge depends on, so it fails whatever the tests "
                "say:",
                "31",
            )
        )
        for path in tree.changed[:10]:
            print(f"  {path}")
        print("They are back as they were. Your code should return values, not write files.")
        if tree.backup:
            print(f"(The versions found after the run are kept in {tree.backup}.)")
        tampered = True
    if tree is not None and tree.elsewhere:
        print(
            "Note: "
            + ", ".join(tree.elsewhere[:5])
            + " changed during the run, not by the code under test "
            "(it could not write files); left as they are."
        )
    if tampered:
        print()
    return tampered


def cmd_doctor(exercises: list[Exercise], args) -> int:
    print(f"python      {platform.python_version()} ({shown_path(sys.executable)})")
    for name in ("pytest", "torch", "minillm"):
        spec = importlib.util.find_spec(name)
        print(
            f"{name:<11} {'missing: pip install -e .[dev]' if spec is None else _version(name)}"
        )
    if importlib.util.find_spec("torch"):
        import torch

        cuda = torch.cuda.is_available()
        gpu = (
            f"yes, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
            if cuda
            else "no (CPU only)"
        )
        print(f"cuda        {gpu}")
    from sandbox import probe_namespaces

    why_not = probe_namespaces()
    print(
        "sandbox     "
        + (
            "namespaces: your code runs with a read-only file system, in its own PID namespace"
            if why_not is None
            else f"a separate process only ({why_not})"
        )
    )
    print(f"workspace   {shown_path(WORKSPACE)}/")
    skipped = [(ex, missing_requirement(ex)) for ex in exercises]
    skipped = [(ex, why) for ex, why in skipped if why]
    runnable = len(exercises) - len(skipped)
    print(f"\n{runnable} of {len(exercises)} exercises run on this machine.")
    for ex, why in skipped:
        print(f"  skipped  {ex.number:>3} {ex.slug}: {why}")
    if not skipped:
        print("None is skipped: they all run on a CPU.")
    ok = importlib.util.find_spec("pytest") is not None
    if not ok:
        print("The judge needs pytest: pip install -e '.[dev]'")
    return 0 if ok else 1


def cmd_hint(exercises: list[Exercise], args) -> int:
    ex = find(exercises, args.id)
    _, body = front_matter((ex.folder / "problem.md").read_text(encoding="utf-8"))
    print(Style.paint(f"Hints for #{ex.number} {ex.slug}", "1") + "\n")
    print(
        section(body, "Hints")
        or "No hints for this one: the test names and messages are your guide."
    )
    return 0


def cmd_solution(exercises: list[Exercise], args) -> int:
    ex = find(exercises, args.id)
    print(
        Style.paint(f"Reference solution for #{ex.number} {ex.slug}", "1")
        + " (yours may differ and still be right)\n"
    )
    print((ex.folder / "solution.py").read_text(encoding="utf-8").rstrip())
    return 0


def _version(module: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "installed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="judge.py",
        description="Practise by rebuilding minillm's pieces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exercises are named by slug or by number (see `list`).",
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="the exercises and your progress (the default)")
    for name, text in [
        ("start", "copy the starter to your workspace (never overwrites) and show the task"),
        ("hint", "show the hints"),
        ("solution", "show the reference solution"),
    ]:
        sub.add_parser(name, help=text).add_argument("id", help="slug or number")
    test = sub.add_parser("test", help="run the tests on your file")
    test.add_argument("id", help="slug or number")
    test.add_argument(
        "file", nargs="?", help="the file to test (default: practice/workspace/<slug>.py)"
    )
    check = sub.add_parser(
        "check", help="every solution passes; every starter and wrong answer fails"
    )
    check.add_argument("ids", nargs="*", help="slugs or numbers (default: all)")
    check.add_argument(
        "-v", "--verbose", action="store_true", help="say which test catches each wrong answer"
    )
    for p in (test, check):
        p.add_argument(
            "--timeout",
            type=float,
            default=DEFAULT_TIMEOUT,
            help="seconds per test (default %(default)g)",
        )
    sub.add_parser("doctor", help="what this machine can run")
    args = parser.parse_args(argv)
    commands = {
        None: cmd_list,
        "list": cmd_list,
        "start": cmd_start,
        "test": cmd_test,
        "check": cmd_check,
        "doctor": cmd_doctor,
        "hint": cmd_hint,
        "solution": cmd_solution,
    }
    oskit.not_dumpable()  # the results pipe and its key stay ours
    # anything the reader's code leaves running comes back to us, to be stopped
    oskit.become_subreaper()
    oskit.die_with_parent(signal.SIGTERM, os.getppid())  # if our parent dies, clean up and go
    try:
        exercises = load_exercises()
        if not exercises:
            print(f"No exercises found in {shown_path(PROBLEMS)}.")
            return 2
        return commands[args.command](exercises, args)
    except UsageError as e:
        print(f"judge.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nstopped.", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `judge.py test x | head`: the reader saw what they wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
