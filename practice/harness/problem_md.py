"""problem_md.py — the YAML front matter of a problem.md, parsed in one place.

Used by practice/judge.py and by the site's hook docs/hooks/chapters.py, so the exercise list on
the site and the judge's list can never read the same file differently.
"""

from __future__ import annotations

import re

import yaml

FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def split_front_matter(text: str) -> tuple[dict | None, str]:
    """(the YAML mapping between the leading '---' lines, the text after it); (None, text)
    without one.

    Malformed YAML, or front matter that is not a mapping, is a ValueError that says so.
    """
    match = FRONT_MATTER.match(text)
    if not match:
        return None, text
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as e:
        raise ValueError(f"front matter is not valid YAML: {e}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise ValueError(f"front matter must be a mapping of fields, got {type(meta).__name__}")
    return meta, text[match.end() :]
