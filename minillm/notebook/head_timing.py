"""head_timing.py — chapter 1's timers for the output head: a forward split into body and head
by hooks, and one product timed in several forms.

Each timer repeats its measurement: a repeat is the median of `rounds` rounds, and the chapter
quotes the range over repeats. Within a round every case runs once, in turn, and the order
alternates from one round to the next, so that no case always follows the same neighbour.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from minillm.model import Transformer

EVICT_BYTES = 64_000_000
_other: torch.Tensor | None = None


def evict() -> None:
    """Read 64 MB of memory no timed call uses, so the next call finds its weights in memory,
    not in the CPU's cache (a real model's weights are far larger than the cache)."""
    global _other
    if _other is None:
        _other = torch.ones(EVICT_BYTES // 4)  # float32: 4 bytes each
    _other.sum()


def _in_turn(names: list[str], rnd: int) -> list[str]:
    return names if rnd % 2 == 0 else names[::-1]  # alternate the order round by round


@torch.no_grad()
def body_and_head_ms(
    model: Transformer,
    cases: dict[str, tuple[torch.Tensor, list[int] | None]],
    rounds: int = 21,
    repeats: int = 5,
) -> dict[str, list[tuple[float, float, float]]]:
    """Per case (token ids, logits_indices): one (body, head, whole call) triple of medians in
    ms per repeat. Hooks on `model.lm_head` stamp the time its input arrives and its output
    leaves, so body (up to the head's input) and head are timed inside the same calls."""
    marks = {}
    hooks = [
        model.lm_head.register_forward_pre_hook(lambda *_: marks.update(i=time.perf_counter())),
        model.lm_head.register_forward_hook(lambda *_: marks.update(o=time.perf_counter())),
    ]
    out = {name: [] for name in cases}
    try:
        for _ in range(repeats):
            runs = {name: [] for name in cases}  # (body, head, whole) per call, in seconds
            for rnd in range(rounds + 1):  # round 0 warms up
                for name in _in_turn(list(cases), rnd):
                    ids, rows = cases[name]
                    evict()
                    start = time.perf_counter()
                    model(ids, logits_indices=rows)
                    end = time.perf_counter()
                    if rnd:
                        runs[name].append(
                            (marks["i"] - start, marks["o"] - marks["i"], end - start)
                        )
            for name, r in runs.items():
                out[name].append(tuple(1e3 * statistics.median(p) for p in zip(*r)))
    finally:
        for hook in hooks:
            hook.remove()
    return out


@torch.no_grad()  # with autograd in play, `linear` calls F.linear itself
def forms_ms(
    forms: dict[str, Callable[[], object]], threads: int, rounds: int = 21, repeats: int = 5
) -> dict[str, list[float]]:
    """Per form: its median ms per repeat, at `threads` threads, each call after `evict()`."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    out = {name: [] for name in forms}
    try:
        for _ in range(repeats):
            runs = {name: [] for name in forms}
            for rnd in range(rounds + 1):  # round 0 warms up
                for name in _in_turn(list(forms), rnd):
                    evict()
                    start = time.perf_counter()
                    forms[name]()
                    if rnd:
                        runs[name].append(time.perf_counter() - start)
            for name, r in runs.items():
                out[name].append(1e3 * statistics.median(r))
    finally:
        torch.set_num_threads(before)
    return out


def span(values, fmt: str = ".2f") -> str:
    """'lo-hi' of repeated measurements (one number when they agree at this precision)."""
    lo, hi = f"{min(values):{fmt}}", f"{max(values):{fmt}}"
    return lo if lo == hi else f"{lo}-{hi}"
