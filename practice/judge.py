#!/usr/bin/env python3
"""judge.py — practise by rebuilding the engine's pieces, graded on your machine.

    python practice/judge.py                 list the exercises and your progress
    python practice/judge.py start rmsnorm   copy the starter to practice/workspace/rmsnorm.py, show the task
    python practice/judge.py test rmsnorm    run the tests on your file (or: test rmsnorm path/to/file.py)
    python practice/judge.py hint rmsnorm    hints, when you are stuck
    python practice/judge.py solution rmsnorm
    python practice/judge.py check           every reference solution passes, every starter fails (CI)
    python practice/judge.py doctor          what this machine can run

An exercise is named by its slug or by its number in book order (`start 1` is `start rmsnorm`).
The tests run in a separate process, each with a time limit, so nothing your code does can crash
the judge: a syntax error, a failed import, an exception or an endless loop is reported as such.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from judge_runner import Outcome, run_tests

PRACTICE = Path(__file__).resolve().parent
REPO = PRACTICE.parent
PROBLEMS = PRACTICE / "problems"
WORKSPACE = Path(os.environ.get("MINILLM_PRACTICE_WORKSPACE") or PRACTICE / "workspace")
STATUS_FILE = WORKSPACE / ".status.json"
FIELDS = ("title", "chapter", "difficulty", "requires")
DEFAULT_TIMEOUT = 10.0  # seconds per test


@dataclass
class Exercise:
    slug: str
    number: int
    title: str
    chapter: str
    difficulty: str
    requires: list[str]
    folder: Path

    @property
    def workspace_file(self) -> Path:
        return WORKSPACE / f"{self.slug}.py"


# ------------------------------------------------------------------ reading the exercises


def front_matter(text: str) -> tuple[dict, str]:
    """The `key: value` lines between the leading '---' lines (values: text, ints, [a, b] lists), and the body."""
    match = re.match(r"\A---\s*\n(.*?)\n---\s*\n?", text, re.DOTALL)
    if not match:
        return {}, text
    meta = {}
    for line in match.group(1).splitlines():
        if ":" not in line or line.lstrip().startswith("#"):
            continue
        key, value = (s.strip() for s in line.split(":", 1))
        if value.startswith("[") and value.endswith("]"):
            meta[key] = [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]
        elif re.fullmatch(r"-?\d+", value):
            meta[key] = int(value)
        else:
            meta[key] = value.strip("'\"")
    return meta, text[match.end():]


def load_exercises() -> list[Exercise]:
    """Every practice/problems/<slug>/ folder with a problem.md, in book order (chapter, then `order`)."""
    found = []
    for md in sorted(PROBLEMS.glob("*/problem.md")):
        meta, _ = front_matter(md.read_text(encoding="utf-8"))
        found.append((str(meta.get("chapter", "")), meta.get("order", 1000), md.parent.name, meta))
    exercises = []
    for number, (chapter, _, slug, meta) in enumerate(sorted(found), start=1):
        requires = meta.get("requires") or []
        exercises.append(Exercise(slug, number, str(meta.get("title", slug)), chapter,
                                  str(meta.get("difficulty", "?")), [requires] if isinstance(requires, str) else requires,
                                  PROBLEMS / slug))
    return exercises


def find(exercises: list[Exercise], wanted: str) -> Exercise:
    """An exercise by number, slug, or the unique start of a slug; a clear error otherwise."""
    wanted = wanted.strip().lower().replace("_", "-")
    if wanted.isdigit() and 1 <= int(wanted) <= len(exercises):
        return exercises[int(wanted) - 1]
    exact = [e for e in exercises if e.slug == wanted]
    matches = exact or [e for e in exercises if e.slug.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    choices = ", ".join(e.slug for e in (matches or exercises))
    why = "matches several exercises" if matches else "is not an exercise"
    raise UsageError(f"'{wanted}' {why}: use a number 1-{len(exercises)} or one of: {choices}")


class UsageError(Exception):
    pass


def section(body: str, heading: str) -> str:
    """The text under '## heading' up to the next '## ' heading ('' if absent)."""
    match = re.search(rf"^## {re.escape(heading)}\s*\n(.*?)(?=^## |\Z)", body, re.DOTALL | re.MULTILINE)
    return match.group(1).strip() if match else ""


def task_text(ex: Exercise) -> str:
    """problem.md without its front matter and its hints."""
    _, body = front_matter((ex.folder / "problem.md").read_text(encoding="utf-8"))
    return re.sub(r"^## Hints\s*\n.*?(?=^## |\Z)", "", body, flags=re.DOTALL | re.MULTILINE).strip()


# ------------------------------------------------------------------ what this machine can run


def missing_requirement(ex: Exercise) -> str | None:
    """Why this machine cannot run the exercise, or None when it can."""
    for need in ex.requires:
        if need == "cuda":
            if not _cuda_available():
                return "requires cuda (no CUDA GPU is visible to torch here)"
        elif importlib.util.find_spec(need) is None:
            return f"requires {need} (not installed: pip install {need})"
    return None


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# ------------------------------------------------------------------ printing


class Style:
    on = sys.stdout.isatty() and not os.environ.get("NO_COLOR")

    @classmethod
    def paint(cls, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if cls.on else text


LABELS = {"passed": ("PASS", "32"), "failed": ("FAIL", "31"), "error": ("ERR ", "31"), "skipped": ("SKIP", "33"),
          "timeout": ("TIME", "31"), "crash": ("DIED", "31"), "not_implemented": ("TODO", "33"),
          "not run": ("----", "2")}


def label(result: dict) -> str:
    key = result.get("kind") if result.get("kind") in ("timeout", "not_implemented", "crash") else result["outcome"]
    text, code = LABELS.get(key, LABELS["failed"])
    return Style.paint(text, code)


def shown_path(path: Path | str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if rel.startswith("..") else rel


def where_line(r: dict) -> str:
    if not r.get("line"):
        return ""
    return f"at {Path(r['file']).name} line {r['line']}: {r.get('code', '')}"


def print_result(r: dict) -> None:
    print(f"  {label(r)}  {r['name']}")
    if r["outcome"] == "passed":
        return
    pad = " " * 8
    for line in r.get("message", "").splitlines():
        print(pad + line)
    if r.get("kind") == "timeout":
        print(pad + "an endless loop? Check that every loop changes what its condition tests.")
    if where_line(r):
        print(pad + where_line(r))
    if r.get("check") and r.get("kind") != "not_implemented":
        print(pad + Style.paint("check: " + r["check"], "2"))
    if r.get("stdout", "").strip():
        printed = r["stdout"].strip().splitlines()
        print(pad + "your code printed: " + " | ".join(printed[:5]) + (" ..." if len(printed) > 5 else ""))
    if r.get("hint") and r.get("kind") != "not_implemented":
        print(pad + Style.paint("hint: " + " ".join(r["hint"].split()), "36"))


def print_load_error(err: dict, file: Path) -> None:
    kind = err.get("kind")
    title = {"syntax": "Python cannot read your file", "import": "Your file imports something that cannot be found",
             "timeout": "Importing your file never finished",
             "exception": "Your file raised an error while being imported"}.get(kind, "Your file could not be imported")
    print(Style.paint(title, "31") + f" ({shown_path(file)})")
    if kind == "syntax" and err.get("line"):
        print(f"  line {err['line']}: {err['message']}")
        code = err.get("code", "")
        if code.strip():
            print(f"    {code.strip()}")
            if err.get("column"):
                indent = len(code) - len(code.lstrip())
                print("    " + " " * max(0, err["column"] - 1 - indent) + "^")
        return
    print(f"  {err.get('message', '')}")
    if where_line(err):
        print(f"  {where_line(err)}")
    if kind == "timeout":
        print("  Code at the top level of the file runs on import: is there an endless loop outside any function?")
    elif kind == "import":
        print("  Use only the standard library, torch and minillm (installed with the book).")


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
    STATUS_FILE.write_text(json.dumps(status, indent=2, sort_keys=True) + "\n", encoding="utf-8")


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
        painted = Style.paint(state, "32" if state == "passed" else "33" if state.startswith("started") else "2")
        print(f"  {ex.number:>3}  {ex.slug:<{slug_w}}  {ex.title:<{title_w}}  {ex.difficulty:<6}  {painted}")
    print("\nStart one with:  python practice/judge.py start <number or name>")
    return 0


def cmd_start(exercises: list[Exercise], args) -> int:
    ex = find(exercises, args.id)
    print(Style.paint(f"#{ex.number} {ex.slug}", "1") + f" ({ex.chapter}, {ex.difficulty})\n")
    print(task_text(ex) + "\n")
    dest = ex.workspace_file
    if dest.exists():
        print(f"{shown_path(dest)} already exists: your work is kept as it is. (Delete it to start over.)")
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
        hint = f"run `python practice/judge.py start {ex.slug}` first" if not args.file else "check the path"
        raise UsageError(f"{shown_path(file)} does not exist: {hint}")
    record = file.resolve() == ex.workspace_file.resolve()
    why_not = missing_requirement(ex)
    if why_not:
        print(f"{ex.slug}: skipped on this machine: {why_not}")
        return 0
    print(Style.paint(f"#{ex.number} {ex.slug}", "1") + f" - {ex.title} - testing {shown_path(file)}\n")
    try:  # a syntax error needs no test process to be found
        compile(file.read_bytes(), str(file), "exec")
    except SyntaxError as e:
        print_load_error({"kind": "syntax", "message": f"{type(e).__name__}: {e.msg}", "line": e.lineno,
                          "code": e.text or "", "column": e.offset}, file)
        if record:
            record_status(ex, 0, 1)
        return 1
    except ValueError as e:  # e.g. a null byte: not Python source at all
        raise UsageError(f"{shown_path(file)} is not a Python source file: {e}") from None
    preload = ["torch", "minillm"] if {"torch", "cuda"} & set(ex.requires) else []
    outcome = run_tests([ex.folder], args.timeout, file=file, preload=preload)
    return report_test(ex, file, outcome, record)


def report_test(ex: Exercise, file: Path, outcome: Outcome, record: bool) -> int:
    if outcome.load_error:
        print_load_error(outcome.load_error, file)
        if record:
            record_status(ex, 0, max(1, len(outcome.collected)))
        return 1
    seen = {r["name"] for r in outcome.results}
    results = outcome.results + [{"name": c["name"], "outcome": "not run", "message": "not run: the run stopped at the failure above"}
                                 for c in outcome.collected if c["name"] not in seen]
    todo = [r for r in results if r.get("kind") == "not_implemented"]
    missing = sorted({r["message"] for r in results if r.get("kind") == "missing_name"})
    if todo and len(todo) == len(results):
        names = sorted({r["message"].split(" is not")[0] for r in todo})
        print(f"  Nothing implemented yet: every test stops at NotImplementedError in {', '.join(names)}.")
        print(f"  Fill in the bodies in {shown_path(file)}; `python practice/judge.py start {ex.slug}` shows the task.")
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
        record_status(ex, passed, total)
    print()
    if total and passed == total and not outcome.problems:
        print(Style.paint(f"All {total} tests pass. Well done!", "32"), end=" ")
        print(f"Compare with the reference: python practice/judge.py solution {ex.slug}")
        return 0
    print(f"{passed} of {total} tests pass. Fix the first failure, then run: python practice/judge.py test {ex.slug}")
    return 1


def cmd_check(exercises: list[Exercise], args) -> int:
    """Every reference solution passes all its tests and every starter fails all of them."""
    chosen = sorted({find(exercises, i).number: find(exercises, i) for i in args.ids}.values(),
                    key=lambda e: e.number) if args.ids else exercises
    began = time.monotonic()
    print(f"Checking {len(chosen)} exercises: each reference solution must pass every test, "
          "and each starter must fail every test.\n")
    runnable, bad = [], 0
    for ex in chosen:
        why_not = missing_requirement(ex)
        if why_not:
            print(f"  {ex.number:>3}  {ex.slug:<22} skipped: {why_not}")
        else:
            runnable.append(ex)
    folders = [ex.folder for ex in runnable]
    with ThreadPoolExecutor(2) as pool:  # the two runs are independent; a second core halves the wait
        solution_run = pool.submit(run_tests, folders, args.timeout, target="solution") if folders else None
        starter_run = pool.submit(run_tests, folders, args.timeout, target="starter") if folders else None
        solutions = solution_run.result() if solution_run else Outcome()
        starters = starter_run.result() if starter_run else Outcome()
    for ex in runnable:
        errors = static_errors(ex)
        sol, sta = solutions.for_problem(ex.slug), starters.for_problem(ex.slug)
        if not sol:
            errors.append("no test ran")
        for r in sol:
            if r["outcome"] != "passed":
                errors.append(f"solution {r['outcome']} {r['name']}: {r.get('message', '')}")
        for r in sta:
            if r["outcome"] == "passed":
                errors.append(f"starter passes {r['name']}: this test cannot tell an empty answer from a right one")
        if len(sta) != len(sol):
            errors.append(f"{len(sol)} tests ran on the solution but {len(sta)} on the starter")
        sol_ok = sum(r["outcome"] == "passed" for r in sol)
        sta_failed = sum(r["outcome"] != "passed" for r in sta)
        verdict = Style.paint("ok", "32") if not errors else Style.paint("PROBLEM", "31")
        print(f"  {ex.number:>3}  {ex.slug:<22} solution {sol_ok:>2}/{len(sol):<2} pass   "
              f"starter {sta_failed:>2}/{len(sta):<2} fail   {verdict}")
        for error in errors:
            print("         " + error.replace("\n", "\n         "))
        bad += bool(errors)
    for problem in solutions.problems + starters.problems:
        print(Style.paint("\nThe test run hit a problem:", "31"))
        print(problem)
        bad += 1
    seconds = time.monotonic() - began
    if bad:
        print(f"\n{bad} problem(s) found ({seconds:.1f} s).")
        return 1
    print(f"\nAll {len(runnable)} exercises are consistent ({seconds:.1f} s).")
    return 0


def static_errors(ex: Exercise) -> list[str]:
    """Front matter complete, files present, and the starter exposes exactly the solution's API."""
    errors = []
    meta, body = front_matter((ex.folder / "problem.md").read_text(encoding="utf-8"))
    errors += [f"problem.md front matter lacks '{f}'" for f in FIELDS if f not in meta]
    if not section(body, "Hints"):
        errors.append("problem.md has no '## Hints' section")
    files = {name: ex.folder / name for name in ("starter.py", "solution.py")}
    if not list(ex.folder.glob("test_*.py")):
        errors.append("no test_*.py file")
    apis = {}
    for name, path in files.items():
        try:
            apis[name] = public_api(ast.parse(path.read_text(encoding="utf-8")))
        except (OSError, SyntaxError) as e:
            errors.append(f"{name}: {e}")
    if len(apis) == 2 and apis["starter.py"] != apis["solution.py"]:
        only = sorted(set(apis["starter.py"].items()) ^ set(apis["solution.py"].items()))
        errors.append("starter.py and solution.py differ in their API: " + "; ".join(f"{k} {v}" for k, v in only))
    return errors


def public_api(tree: ast.Module) -> dict[str, str]:
    """Public functions and classes with their signatures (methods and fields of classes too)."""
    api = {}

    def signature(fn) -> str:
        return ast.unparse(fn.args)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            api[node.name] = f"({signature(node)})"
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            api[node.name] = "class(" + ", ".join(ast.unparse(b) for b in node.bases) + ")"
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        not item.name.startswith("_") or item.name in ("__init__", "__call__")):
                    api[f"{node.name}.{item.name}"] = f"({signature(item)})"
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    api[f"{node.name}.{item.target.id}"] = ast.unparse(item.annotation)
    return api


def cmd_doctor(exercises: list[Exercise], args) -> int:
    print(f"python      {platform.python_version()} ({shown_path(sys.executable)})")
    for name in ("pytest", "torch", "minillm"):
        spec = importlib.util.find_spec(name)
        print(f"{name:<11} {'missing: pip install -e .[dev]' if spec is None else _version(name)}")
    if importlib.util.find_spec("torch"):
        import torch

        cuda = torch.cuda.is_available()
        gpu = f"yes, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if cuda else "no (CPU only)"
        print(f"cuda        {gpu}")
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


def _version(module: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "installed"


def cmd_hint(exercises: list[Exercise], args) -> int:
    ex = find(exercises, args.id)
    _, body = front_matter((ex.folder / "problem.md").read_text(encoding="utf-8"))
    print(Style.paint(f"Hints for #{ex.number} {ex.slug}", "1") + "\n")
    print(section(body, "Hints") or "No hints for this one: the test names and messages are your guide.")
    return 0


def cmd_solution(exercises: list[Exercise], args) -> int:
    ex = find(exercises, args.id)
    print(Style.paint(f"Reference solution for #{ex.number} {ex.slug}", "1") + " (yours may differ and still be right)\n")
    print((ex.folder / "solution.py").read_text(encoding="utf-8").rstrip())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="judge.py", description="Practise by rebuilding minillm's pieces.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Exercises are named by slug or by number (see `list`).")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="the exercises and your progress (the default)")
    for name, text in [("start", "copy the starter to your workspace (never overwrites) and show the task"),
                       ("hint", "show the hints"), ("solution", "show the reference solution")]:
        sub.add_parser(name, help=text).add_argument("id", help="slug or number")
    test = sub.add_parser("test", help="run the tests on your file")
    test.add_argument("id", help="slug or number")
    test.add_argument("file", nargs="?", help="the file to test (default: practice/workspace/<slug>.py)")
    check = sub.add_parser("check", help="every reference solution passes and every starter fails")
    check.add_argument("ids", nargs="*", help="slugs or numbers (default: all)")
    for p in (test, check):
        p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per test (default %(default)g)")
    sub.add_parser("doctor", help="what this machine can run")
    args = parser.parse_args(argv)
    commands = {None: cmd_list, "list": cmd_list, "start": cmd_start, "test": cmd_test, "check": cmd_check,
                "doctor": cmd_doctor, "hint": cmd_hint, "solution": cmd_solution}
    exercises = load_exercises()
    if not exercises:
        print(f"No exercises found in {shown_path(PROBLEMS)}.")
        return 2
    try:
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
