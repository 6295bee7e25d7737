"""Show the engine's own code in a chapter, highlighted, the same in JupyterLab and on the
book's site.

`source(obj, ...)` returns a small object that Jupyter displays as a Markdown fenced code block
(`text/markdown`): JupyterLab highlights it as Python, and the site's notebook renderer turns it
into the same highlighted block as the rest of the book's code. Printed in a terminal, it is the
plain source.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # minillm/notebook/show.py -> the repository


class Source:
    """The source of one or more functions, classes or methods, as one displayable block."""

    def __init__(self, *objs):
        if not objs:
            raise ValueError("source() needs at least one function, class or method: got none")
        self.objs = objs
        self.parts = [_source_of(obj) for obj in objs]

    @property
    def text(self) -> str:
        return "\n\n".join(part.rstrip("\n") for part in self.parts) + "\n"

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        # a fence longer than any run of backticks inside the code, so the code can never close
        # it
        longest = max((len(run) for run in re.findall(r"`+", self.text)), default=0)
        fence = "`" * max(3, longest + 1)
        # the header wraps like the code does, so the block never scrolls sideways on the site
        header = "\n".join(
            textwrap.wrap(
                self.where(),
                94,
                initial_indent="# ",
                subsequent_indent="#   ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
        return f"{fence}python\n{header}\n{self.text}{fence}\n"

    def where(self) -> str:
        """Where a reader finds the code: its file(s) in the repository, and the class of a
        method."""
        files = []
        for obj in self.objs:
            path = _file_of(obj)
            if path not in files:
                files.append(path)
        methods = [
            obj.__qualname__ for obj in self.objs if "." in getattr(obj, "__qualname__", "")
        ]
        return ", ".join(files) + (f": {', '.join(methods)}" if methods else "")


def source(*objs) -> Source:
    """Display the source of functions, classes or methods as highlighted Python (one block)."""
    return Source(*objs)


def _kernel_function(obj):
    """A Triton kernel (`@triton.jit`, compiled or interpreted) wraps the Python function it was
    written as."""
    fn = getattr(obj, "fn", None)
    return (
        fn
        if inspect.isfunction(fn) and not inspect.isroutine(obj) and not inspect.isclass(obj)
        else obj
    )


def _source_of(obj) -> str:
    obj = _kernel_function(obj)
    try:
        code = inspect.getsource(obj)
    except (TypeError, OSError) as error:
        raise ValueError(f"cannot show the source of {obj!r}: {error}") from None
    return textwrap.dedent(code)  # a method's source keeps its class indentation: drop it


def _file_of(obj) -> str:
    target = inspect.unwrap(obj.fget if isinstance(obj, property) else _kernel_function(obj))
    try:
        path = Path(inspect.getsourcefile(target) or "").resolve()
    except TypeError:
        return "?"
    try:
        return path.relative_to(PACKAGE_ROOT).as_posix()
    except ValueError:
        return path.name


def cut(listing, blocks):
    """`listing` (a `Source` or a str) with each block, named by the start of its first and last
    line, replaced by one `# ... note` comment at the block's indent: a chapter shows a function
    without the lines of later chapters. Raises ValueError for a block that is not there."""
    text = listing.text if isinstance(listing, Source) else listing
    lines = text.splitlines()
    for first, last, note in blocks:
        i = next((k for k, line in enumerate(lines) if line.strip().startswith(first)), None)
        j = next(
            (k for k in range(i or 0, len(lines)) if lines[k].strip().startswith(last)), None
        )
        if i is None or j is None:
            raise ValueError(f"no block from {first!r} to {last!r} in the listing")
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines[i : j + 1] = [f"{indent}# ... {note}"]
    cut_text = "\n".join(lines) + "\n"
    if isinstance(listing, Source):
        listing.parts = [cut_text]
        return listing
    return cut_text
