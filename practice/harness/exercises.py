"""exercises.py — the exercises on disk: practice/problems/<slug>/ folders, read in book
order."""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from problem_md import split_front_matter
from protocol import PRACTICE, PROBLEMS, WORKSPACE_ENV

WORKSPACE = Path(os.environ.get(WORKSPACE_ENV) or PRACTICE / "workspace")
FIELDS = ("title", "chapter", "difficulty", "requires")


class UsageError(Exception):
    """A mistake on the command line, said in one sentence (exit code 2)."""


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


def front_matter(text: str) -> tuple[dict, str]:
    """The YAML front matter (problem_md.py, shared with the site) and the body; {} when there
    is none."""
    meta, body = split_front_matter(text)
    return meta or {}, body


def load_exercises() -> list[Exercise]:
    """Every practice/problems/<slug>/ folder with a problem.md, in book order (chapter, then
    `order`)."""
    found = []
    for md in sorted(PROBLEMS.glob("*/problem.md")):
        try:
            meta, _ = front_matter(md.read_text(encoding="utf-8"))
        except ValueError as e:
            raise UsageError(f"{md}: {e}") from None
        found.append(
            (str(meta.get("chapter", "")), meta.get("order", 1000), md.parent.name, meta)
        )
    exercises = []
    for number, (chapter, _, slug, meta) in enumerate(sorted(found), start=1):
        requires = meta.get("requires") or []
        exercises.append(
            Exercise(
                slug,
                number,
                str(meta.get("title", slug)),
                chapter,
                str(meta.get("difficulty", "?")),
                [requires] if isinstance(requires, str) else list(requires),
                PROBLEMS / slug,
            )
        )
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


def section(body: str, heading: str) -> str:
    """The text under '## heading' up to the next '## ' heading ('' if absent)."""
    match = re.search(
        rf"^## {re.escape(heading)}\s*\n(.*?)(?=^## |\Z)", body, re.DOTALL | re.MULTILINE
    )
    return match.group(1).strip() if match else ""


def task_text(ex: Exercise) -> str:
    """problem.md without its front matter and its hints."""
    _, body = front_matter((ex.folder / "problem.md").read_text(encoding="utf-8"))
    return re.sub(
        r"^## Hints\s*\n.*?(?=^## |\Z)", "", body, flags=re.DOTALL | re.MULTILINE
    ).strip()


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
