"""checking.py — one small helper for every public argument check: the name, the value, what was
expected.

    block_size = check_int("block_size", block_size, min=1)          # "block_size is 0:
    expected an int >= 1" top_p = check_float("top_p", top_p, min=0, min_inclusive=False, max=1)

Every constructor and function the book exposes checks its arguments with these, so a bad value
fails at once, with one message format, before any state changes. Integers accept what Python
calls an integer (`int`, numpy integers, 0-d integer tensors: anything with `__index__`) but
never `bool`, and come back as plain `int`; floats accept any real number and come back as
`float`.
"""

from __future__ import annotations

import math
import operator


def as_int(x) -> int | None:
    """x as a Python int if it is an integer (int, numpy or 0-d tensor integer, not bool), else
    None."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def _range_text(min, max, min_inclusive: bool = True) -> str:
    parts = []
    if min is not None:
        parts.append(f"{'>=' if min_inclusive else '>'} {min}")
    if max is not None:
        parts.append(f"<= {max}")
    return " and ".join(parts)


def check_int(name: str, value, *, min: int | None = None, max: int | None = None) -> int:
    """value as a plain int, or ValueError naming `name`, the value and the expected range."""
    n = as_int(value)
    expected = "an int" + (
        " " + _range_text(min, max) if min is not None or max is not None else ""
    )
    if n is None:
        raise ValueError(f"{name} is {value!r}: expected {expected}")
    if (min is not None and n < min) or (max is not None and n > max):
        raise ValueError(f"{name} is {n}: expected {expected}")
    return n


def check_float(
    name: str,
    value,
    *,
    min: float | None = None,
    max: float | None = None,
    min_inclusive: bool = True,
) -> float:
    """value as a finite float, or ValueError naming `name`, the value and the expected
    range."""
    expected = "a finite number" + (
        " " + _range_text(min, max, min_inclusive) if min is not None or max is not None else ""
    )
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        and not hasattr(value, "__float__")
    ):
        raise ValueError(f"{name} is {value!r}: expected {expected}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} is {value!r}: expected {expected}") from None
    too_low = min is not None and (x < min if min_inclusive else x <= min)
    if not math.isfinite(x) or too_low or (max is not None and x > max):
        raise ValueError(f"{name} is {value!r}: expected {expected}")
    return x


def check_int_list(
    name: str, values, *, min: int | None = None, max: int | None = None
) -> list[int]:
    """A sequence of ints (list, tuple, 1-D array or tensor) as a list of plain ints; the error
    names the index."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} is {values!r}: expected a list of ints")
    if getattr(values, "ndim", 1) != 1:
        raise ValueError(f"{name} has shape {tuple(values.shape)}: expected a 1-D list of ints")
    values = list(values)
    # Plain ints in range, the common case (an engine's metadata, every step), are checked in
    # bulk; only a list that fails goes entry by entry, so the error names the first bad index.
    if all(type(v) is int for v in values) and all(
        (min is None or v >= min) and (max is None or v <= max) for v in values
    ):
        return values
    return [check_int(f"{name}[{i}]", v, min=min, max=max) for i, v in enumerate(values)]
