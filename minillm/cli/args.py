"""args.py — the argument types the commands share: each option checked by argparse before any
work.

A bad value stops the command at once with the option's name, the value and what was expected,
in the words of checking.py; `serve`, `bench` and `bench-serve` import these, and `commands.py`
imports them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from minillm.checking import check_int


def _fail(error: ValueError, text: str):
    """argparse names the option; we add the value and, in checking.py's words, what was
    expected."""
    expected = str(error).split(": expected ", 1)[-1]
    return argparse.ArgumentTypeError(f"got {text!r}, expected {expected}")


def int_arg(min: int | None = None, max: int | None = None):
    """An argparse type: an int in [min, max]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = text  # not a number: check_int rejects it and says what was expected
        try:
            return check_int("value", value, min=min, max=max)
        except ValueError as e:
            raise _fail(e, text) from None

    parse.__name__ = "int"
    return parse


def int_list_arg(min: int | None = None, length: int | None = None, ascending: bool = False):
    """An argparse type: comma-separated ints >= min (exactly `length` of them; non-decreasing
    if ascending)."""
    what = f"{length} " if length else ""

    def parse(text: str) -> list[int]:
        parts = [p.strip() for p in text.split(",")]
        try:
            values = [check_int("value", int(p), min=min) for p in parts]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"got {text!r}, expected {what or 'a list of '}comma-separated ints"
                f"{f' >= {min}' if min is not None else ''}"
            ) from None
        if length is not None and len(values) != length:
            raise argparse.ArgumentTypeError(
                f"got {text!r}, expected {length} comma-separated ints"
            )
        if ascending and values != sorted(values):
            raise argparse.ArgumentTypeError(f"got {text!r}, expected min,max with min <= max")
        return values

    parse.__name__ = "int list"
    return parse


def dtype_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(n in ("float32", "bfloat16", "float16") for n in names):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected float32, bfloat16 or float16 (comma-separated)"
        )
    return names


def existing_folder(text: str) -> Path:
    """A checkpoint folder, or `smollm2` (the real model, converted into the cache on first
    use)."""
    if text == "smollm2":
        from minillm.checkpoints import resolve_model

        try:
            return resolve_model(text)
        except (
            OSError,
            ValueError,
        ) as e:  # not installed, or a damaged GGUF: the message says why
            raise argparse.ArgumentTypeError(str(e)) from None
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected an existing checkpoint folder or smollm2"
        )
    return path


def writable_file(text: str) -> Path:
    """A path we will be able to write at the end of a long run: checked now, so no results are
    lost."""
    path = Path(text).expanduser()
    if path.is_dir() or text.endswith(os.sep):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, which is a folder: expected a file path such as "
            f"{Path(text) / 'bench.json'}"
        )
    folder = path.parent
    while (
        not folder.exists() and folder != folder.parent
    ):  # the first existing ancestor: the rest is created
        folder = folder.parent
    if (
        not folder.is_dir()
        or not os.access(folder, os.W_OK)
        or (path.exists() and not os.access(path, os.W_OK))
    ):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected a path this user can write ({folder} is not a "
            "writable folder)"
        )
    return path
