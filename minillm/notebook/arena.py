"""arena.py — chapter 3's fragmentation play: contiguous KV buffers of many sizes in one arena.

Requests, all waiting at the start, are admitted in order. Each takes a contiguous buffer of
`need[i]` tokens and holds it for `hold[i]` forwards (every running request advances one token
per forward). First fit places a buffer in the lowest hole large enough; with `holes_join` a
request is admitted whenever the free memory in total suffices, as if the holes could always be
joined into one (no fragmentation).
"""

from __future__ import annotations

import numpy as np


def first_fit(running: list[tuple[int, int, int]], size: int, arena: int) -> int | None:
    """The start of the lowest hole of at least `size` tokens between the running buffers
    (each `(last forward, start, size)`), or None."""
    start = 0
    for s, n in sorted((s, n) for _, s, n in running) + [(arena, 0)]:
        if s - start >= size:
            return start
        start = s + n
    return None


def fill_arena(need: list[int], hold: list[int], arena: int, holes_join: bool):
    """Returns the mean number of requests running while others wait, and how many requests
    were refused at least once while the free memory in total would have held them."""
    running, t, i, refused, spans = [], 0, 0, set(), []  # running: (last forward, start, size)
    while i < len(need):
        free = arena - sum(n for *_, n in running)
        start = 0 if holes_join else first_fit(running, need[i], arena)
        if free >= need[i] and start is not None:
            running.append((t + hold[i], start, need[i]))
            i += 1
            continue
        if free >= need[i]:
            refused.add(i)  # enough memory in total, but no single hole holds it
        t_next = min(end for end, *_ in running)  # wait for the next request to finish
        spans.append((t_next - t, len(running)))
        running, t = [r for r in running if r[0] > t_next], t_next
    steps, counts = np.array(spans).T
    return float((steps * counts).sum() / steps.sum()), len(refused)
