"""judge_report.py — how the judge prints: labels, one test's result, a file that would not
import."""

from __future__ import annotations

import os
import sys
from pathlib import Path


class Style:
    on = sys.stdout.isatty() and not os.environ.get("NO_COLOR")

    @classmethod
    def paint(cls, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if cls.on else text


LABELS = {
    "passed": ("PASS", "32"),
    "failed": ("FAIL", "31"),
    "error": ("ERR ", "31"),
    "skipped": ("SKIP", "33"),
    "timeout": ("TIME", "31"),
    "crash": ("DIED", "31"),
    "not_implemented": ("TODO", "33"),
    "load": ("ERR ", "31"),
    "not run": ("----", "2"),
}


def label(result: dict) -> str:
    key = (
        result.get("kind")
        if result.get("kind") in ("timeout", "not_implemented", "crash", "load")
        else result["outcome"]
    )
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
        print(
            pad
            + "your code printed: "
            + " | ".join(printed[:5])
            + (" ..." if len(printed) > 5 else "")
        )
    if r.get("hint") and r.get("kind") != "not_implemented":
        print(pad + Style.paint("hint: " + " ".join(r["hint"].split()), "36"))


def print_load_error(err: dict, file: Path) -> None:
    kind = err.get("kind")
    title = {
        "syntax": "Python cannot read your file",
        "import": "Your file imports something that cannot be found",
        "timeout": "Importing your file never finished",
        "exception": "Your file raised an error while being imported",
    }.get(kind, "Your file could not be imported")
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
        print(
            "  Code at the top level of the file runs on import: is there an endless loop "
            "outside any function?"
        )
    elif kind == "import":
        print("  Use only the standard library, torch and minillm (installed with the book).")
