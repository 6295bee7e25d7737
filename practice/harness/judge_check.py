"""judge_check.py — `judge.py check`: the exercises are consistent, and their tests can fail.

For every exercise: the reference solution passes every test; the starter fails every test;
every plausible wrong answer in wrong/ (typical mistakes, and one that hard-codes the example's
numbers) fails the test its docstring names ("Caught by: test_x."; only that test runs for it);
the starter and the wrong answers have exactly the solution's API; problem.md has its front
matter and hints. The run itself is verified: the judge's files are byte-identical after it, and
the output says so.
"""

from __future__ import annotations

import ast
import re
import time

from exercises import FIELDS, Exercise, find, front_matter, missing_requirement, section
from judge_report import Style
from judge_runner import run_tests
from protocol import SOLUTION, STARTER, WRONG_DIR

# every exercise has a wrong answer whose name starts so: it fits only the example
HARDCODED = "hardcoded_"


def cmd_check(exercises: list[Exercise], args) -> int:
    chosen = (
        sorted(
            {find(exercises, i).number: find(exercises, i) for i in args.ids}.values(),
            key=lambda e: e.number,
        )
        if args.ids
        else exercises
    )
    began = time.monotonic()
    print(
        f"Checking {len(chosen)} exercises: each reference solution must pass every test, "
        "each starter must "
        "fail every test, and each wrong answer must fail at least one.\n"
    )
    runnable, bad = [], 0
    for ex in chosen:
        why_not = missing_requirement(ex)
        if why_not:
            print(f"  {ex.number:>3}  {ex.slug:<22} skipped: {why_not}")
        else:
            runnable.append(ex)
    outcome = (
        run_tests(
            [ex.folder for ex in runnable],
            args.timeout,
            targets=f"{SOLUTION},{STARTER},{WRONG_DIR}",
            preload=["torch", "minillm"],
            parallel=2,
        )
        if runnable
        else None
    )
    for ex in runnable:
        errors = static_errors(ex)
        sol, sta = outcome.for_problem(ex.slug, SOLUTION), outcome.for_problem(ex.slug, STARTER)
        if not sol:
            errors.append("no test ran")
        errors += [
            f"solution {r['outcome']} {r['name']}: {r.get('message', '')}"
            for r in sol
            if r["outcome"] != "passed"
        ]
        errors += [
            f"starter passes {r['name']}: this test cannot tell an empty answer from a right "
            "one"
            for r in sta
            if r["outcome"] == "passed"
        ]
        if len(sta) != len(sol):
            errors.append(f"{len(sol)} tests ran on the solution but {len(sta)} on the starter")
        wrong = sorted(p.stem for p in (ex.folder / WRONG_DIR).glob("*.py"))
        caught, notes = 0, []
        for name in wrong:
            runs = outcome.for_problem(ex.slug, f"{WRONG_DIR}/{name}")
            failed = [r for r in runs if r["outcome"] == "failed"]
            if failed:
                caught += 1
                if args.verbose:
                    first = (failed[0].get("message") or "").strip().splitlines() or [""]
                    notes.append(
                        f"{WRONG_DIR}/{name}.py: caught by {failed[0]['name']}: "
                        f"{first[0][:150]}"
                    )
            else:
                ran = sorted({r["name"].split("[")[0] for r in runs}) or ["no test"]
                errors.append(
                    f"{WRONG_DIR}/{name}.py passes {', '.join(ran)}, which should catch it: "
                    "the tests "
                    f"miss this mistake ({_first_line(ex, name)})"
                )
        sol_ok = sum(r["outcome"] == "passed" for r in sol)
        sta_failed = sum(r["outcome"] != "passed" for r in sta)
        verdict = Style.paint("ok", "32") if not errors else Style.paint("PROBLEM", "31")
        print(
            f"  {ex.number:>3}  {ex.slug:<22} solution {sol_ok:>2}/{len(sol):<2} pass   "
            f"starter {sta_failed:>2}/{len(sta):<2} fail   wrong {caught:>2}/{len(wrong):<2} "
            f"fail   {verdict}"
        )
        for line in errors + notes:
            print("         " + line.replace("\n", "\n         "))
        bad += bool(errors)
    if outcome is not None:
        bad += _print_run(outcome)
    seconds = time.monotonic() - began
    if bad:
        print(f"\n{bad} problem(s) found ({seconds:.1f} s).")
        return 1
    print(f"\nAll {len(runnable)} exercises are consistent ({seconds:.1f} s).")
    return 0


def _print_run(outcome) -> int:
    """The run's own health: problems of the test process, the sandbox, and the verified
    tree."""
    bad = 0
    for problem in outcome.problems:
        print(Style.paint("\nThe test run hit a problem:", "31"))
        print(problem)
        bad += 1
    if outcome.forged:
        print(
            Style.paint(
                "\nThe results channel carried lines the test process did not sign.", "31"
            )
        )
        bad += 1
    mode = outcome.sandbox.get("mode")
    print(
        "\nThe code under test ran in "
        + (
            "a namespace sandbox (read-only files, own PIDs)"
            if mode == "namespaces"
            else "separate processes"
        )
        + (f" ({outcome.sandbox.get('why')})" if outcome.sandbox.get("why") else "")
        + "."
    )
    tree = outcome.tree
    if tree is not None and tree.ok:
        print(
            f"Tree verified: the {tree.files} files of practice/ and minillm/ are "
            "byte-identical after the run "
            f"(sha256 {tree.digest[:16]})."
        )
    else:
        changed = ", ".join(tree.changed[:5]) if tree else "not checked"
        kept = f"; the versions found are in {tree.backup}" if tree and tree.backup else ""
        print(
            Style.paint(
                f"Tree NOT verified: the run changed {changed} (put back as they were{kept}).",
                "31",
            )
        )
        bad += 1
    if tree is not None and tree.elsewhere:
        print(
            "Note: "
            + ", ".join(tree.elsewhere[:5])
            + " changed during the run, not by the code under test; "
            "left as they are."
        )
    return bad


def _first_line(ex: Exercise, name: str) -> str:
    try:
        doc = ast.get_docstring(
            ast.parse((ex.folder / WRONG_DIR / f"{name}.py").read_text(encoding="utf-8"))
        )
    except (OSError, SyntaxError):
        doc = None
    return (doc or "no docstring").strip().splitlines()[0]


def static_errors(ex: Exercise) -> list[str]:
    """Front matter complete, files present, and the starter and wrong answers expose exactly
    the solution's API."""
    errors = []
    try:
        meta, body = front_matter((ex.folder / "problem.md").read_text(encoding="utf-8"))
    except ValueError as e:
        return [f"problem.md: {e}"]
    errors += [f"problem.md front matter lacks '{f}'" for f in FIELDS if f not in meta]
    if not section(body, "Hints"):
        errors.append("problem.md has no '## Hints' section")
    if not list(ex.folder.glob("test_*.py")):
        errors.append("no test_*.py file")
    wrong = sorted((ex.folder / WRONG_DIR).glob("*.py"))
    if not any(p.stem.startswith(HARDCODED) for p in wrong):
        errors.append(
            f"no {WRONG_DIR}/{HARDCODED}*.py: a wrong answer that fits only the example's "
            "numbers"
        )
    tests = {
        node.name
        for path in ex.folder.glob("test_*.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef)
    }
    apis = {}
    for path in [ex.folder / "solution.py", ex.folder / "starter.py", *wrong]:
        name = path.relative_to(ex.folder).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError) as e:
            errors.append(f"{name}: {e}")
            continue
        apis[name] = public_api(tree)
        if path.parent.name == WRONG_DIR:
            doc = ast.get_docstring(tree) or ""
            caught = re.search(r"^Caught by: (test_\w+)", doc, re.MULTILINE)
            if not doc.startswith("Wrong: "):
                errors.append(
                    f"{name} has no docstring starting 'Wrong: ' to say which mistake it makes"
                )
            elif not caught:
                errors.append(
                    f"{name}'s docstring names no test ('Caught by: test_...') that must "
                    "catch it"
                )
            elif caught.group(1) not in tests:
                errors.append(
                    f"{name} should be caught by {caught.group(1)}, which is not a test of "
                    "this exercise"
                )
    reference = apis.get("solution.py")
    for name, api in apis.items():
        if reference is not None and api != reference:
            only = sorted(set(api.items()) ^ set(reference.items()))
            errors.append(
                f"{name} and solution.py differ in their API: "
                + "; ".join(f"{k} {v}" for k, v in only)
            )
    return errors


def public_api(tree: ast.Module) -> dict[str, str]:
    """Public functions and classes with their signatures (methods and fields of classes
    too)."""
    api = {}

    def signature(fn) -> str:
        return ast.unparse(fn.args)

    for node in tree.body:
        if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)
        ) and not node.name.startswith("_"):
            api[node.name] = f"({signature(node)})"
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            api[node.name] = "class(" + ", ".join(ast.unparse(b) for b in node.bases) + ")"
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    not item.name.startswith("_") or item.name in ("__init__", "__call__")
                ):
                    api[f"{node.name}.{item.name}"] = f"({signature(item)})"
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    api[f"{node.name}.{item.target.id}"] = ast.unparse(item.annotation)
    return api
