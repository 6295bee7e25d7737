"""bench/forward_split.py — chapter 9's forwards split by a clock around their projections and
their attention: `split_forward` wraps the engine's own forward (the oracle sweep wraps it
around every run) and records, per call, the ms spent in projections and in attention.

No profiler: the same call that times the whole forward times every `linear` call (the
projections, the output layer's included) and every `PagedAttention.attend` call (each layer's
K/V store and its `decode` or `varlen` attention) with `time.perf_counter` around the call.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import minillm.model
from minillm.paged import PagedAttention

PARTS = ("projections", "attention")  # what `clocked` times, call by call


@contextmanager
def clocked(totals: dict):
    """Add the ms of every `linear` call the model makes to totals["projections"], and of every
    `PagedAttention.attend` call to totals["attention"]; both restored on exit."""
    linear, attend = minillm.model.linear, PagedAttention.attend

    def clock(part, f):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                totals[part] += (time.perf_counter() - t0) * 1e3

        return timed

    minillm.model.linear = clock("projections", linear)
    PagedAttention.attend = clock("attention", attend)
    try:
        yield
    finally:
        minillm.model.linear, PagedAttention.attend = linear, attend


def split_forward(forward, parts: dict):
    """forward, each call clocked: parts[query tokens in the step] gets one (projections ms,
    attention ms) per call, as `clocked` splits it."""

    def split(batch):
        totals = dict.fromkeys(PARTS, 0.0)
        with clocked(totals):
            out = forward(batch)
        parts.setdefault(int(batch.input_ids.shape[0]), []).append(
            tuple(totals[p] for p in PARTS)
        )
        return out

    return split
