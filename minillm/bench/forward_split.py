"""bench/forward_split.py — chapter 9's forwards split by a clock around their projections and
their attention: the engine's own (`split_forward`, which the oracle sweep wraps around every
run), and several forms of one bench-model forward taking turns round after round
(`time_forms`).

    forms = {"decode": (8, 1, 1, False), "verify, k = 4": (8, 5, 5, False)}
    wall, parts = time_forms(model, forms, context=64, rounds=60)

A form is (requests, query tokens each, rows of logits each, forced through `varlen`). Every
form runs once per round, in turn, so a burst of other work on the machine lands on all of them
alike; the per-round differences between two forms are the paired numbers to read. No profiler:
the same rounds that time the whole forward time every `linear` call (the projections, the
output layer's included) and every `PagedAttention.attend` call (each layer's K/V store and its
`decode` or `varlen` attention) with `time.perf_counter` around the call.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

import torch

import minillm.model
from minillm.paged import PagedAttention, PagedKVCache
from minillm.runner import ModelRunner, build_batch

PARTS = ("projections", "attention")  # what `clocked` times, call by call


@contextmanager
def varlen_only():
    """Every step through `PagedAttention.varlen`, the per-request loop, decodes included."""
    decode = PagedAttention.decode
    PagedAttention.decode = lambda self, layer, q, scale: self.varlen(layer, q, scale)
    try:
        yield
    finally:
        PagedAttention.decode = decode


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


def prepare(model, requests: int, query_tokens: int, num_logits: int, context: int, bs=16):
    """A runner whose `requests` requests each hold `context` positions, and the batch that
    adds `query_tokens` to each, with logits at the last `num_logits` of them."""
    per = -(-(context + query_tokens) // bs)  # blocks per request
    runner = ModelRunner(model, PagedKVCache.for_model(model, requests * per, bs))
    tables = [list(range(r * per, (r + 1) * per)) for r in range(requests)]
    items = [([2] * query_tokens, context, t, num_logits) for t in tables]
    return runner, build_batch(items, bs)


def time_forms(model, forms: dict, context: int, rounds: int, warmup: int = 2):
    """Per form: the ms of each round's forward, and per part (`PARTS`) the ms of that round's
    calls to it."""
    prepared = {name: prepare(model, *f[:3], context) for name, f in forms.items()}
    wall = {name: [] for name in forms}  # [rounds] ms
    parts = {name: {p: [] for p in PARTS} for name in forms}  # [rounds] ms per part
    with torch.no_grad():
        for rnd in range(warmup + rounds):
            for name, (*_, forced) in forms.items():
                runner, batch = prepared[name]
                totals = dict.fromkeys(PARTS, 0.0)
                with varlen_only() if forced else nullcontext(), clocked(totals):
                    t0 = time.perf_counter()
                    runner.forward(batch)
                    ms = (time.perf_counter() - t0) * 1e3
                if rnd >= warmup:
                    wall[name].append(ms)
                    for p in PARTS:
                        parts[name][p].append(totals[p])
    return wall, parts


def paired(wall: dict, a: str, b: str) -> tuple[float, float, float]:
    """Form a's ms minus form b's, round by round: (median, min, max) of the differences."""
    diffs = sorted(x - y for x, y in zip(wall[a], wall[b], strict=True))
    n = len(diffs)
    median = (diffs[(n - 1) // 2] + diffs[n // 2]) / 2
    return median, diffs[0], diffs[-1]
