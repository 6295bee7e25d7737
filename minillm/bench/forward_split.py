"""bench/forward_split.py — chapter 9's live forwards: several forms of one bench-model forward,
taking turns round after round, timed alone and then split by torch.profiler.

    forms = {"decode": (8, 1, 1, False), "verify, k = 4": (8, 5, 5, False)}
    wall, proj, ops = time_forms(model, forms, context=64, rounds=9)

A form is (requests, query tokens each, rows of logits each, forced through `varlen`). Every
form runs once per round, in turn, so a burst of other work on the machine lands on all of them
alike; the per-round differences between two forms are the paired numbers to read. The timed
rounds run without the profiler; separate profiled rounds then split each forward into its
projections (every `linear` call: `PROJECTION_OPS`) and the other operators.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext

import torch

from minillm.bench.floor import PROJECTION_OPS
from minillm.paged import PagedAttention, PagedKVCache
from minillm.runner import ModelRunner, build_batch


@contextmanager
def quiet_stderr():
    """The process's stderr (file descriptor 2) sent to /dev/null: the profiler's C++ side logs
    each start and stop there, past Python's sys.stderr."""
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(null)
        os.close(saved)


@contextmanager
def varlen_only():
    """Every step through `PagedAttention.varlen`, the per-request loop, decodes included."""
    decode = PagedAttention.decode
    PagedAttention.decode = lambda self, layer, q, scale: self.varlen(layer, q, scale)
    try:
        yield
    finally:
        PagedAttention.decode = decode


def prepare(model, requests: int, query_tokens: int, num_logits: int, context: int, bs=16):
    """A runner whose `requests` requests each hold `context` positions, and the batch that
    adds `query_tokens` to each, with logits at the last `num_logits` of them."""
    per = -(-(context + query_tokens) // bs)  # blocks per request
    runner = ModelRunner(model, PagedKVCache.for_model(model, requests * per, bs))
    tables = [list(range(r * per, (r + 1) * per)) for r in range(requests)]
    items = [([2] * query_tokens, context, t, num_logits) for t in tables]
    return runner, build_batch(items, bs)


def time_forms(model, forms: dict, context: int, rounds: int, warmup: int = 2):
    """Per form: the ms of each timed round's forward, the ms of each profiled round's
    projections, and the profiled rounds' mean ms per other operator ("outside any operator":
    the forward's own time between operators)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    prepared = {name: prepare(model, *f[:3], context) for name, f in forms.items()}
    wall = {name: [] for name in forms}  # [rounds] ms, unprofiled
    proj = {name: [] for name in forms}  # [rounds] ms in the projections, profiled
    ops = {name: {} for name in forms}  # operator -> mean ms, profiled
    with torch.no_grad():
        for rnd in range(warmup + 2 * rounds):  # warm-up, timed rounds, then profiled ones
            for name, (*_, forced) in forms.items():
                runner, batch = prepared[name]
                with varlen_only() if forced else nullcontext():
                    if rnd < warmup + rounds:
                        t0 = time.perf_counter()
                        runner.forward(batch)
                        if rnd >= warmup:
                            wall[name].append((time.perf_counter() - t0) * 1e3)
                        continue
                    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
                        with record_function("forward"):  # its self time: outside operators
                            runner.forward(batch)
                events = prof.key_averages()
                proj[name].append(
                    sum(e.self_cpu_time_total for e in events if e.key in PROJECTION_OPS) / 1e3
                )
                for e in events:
                    if e.key not in PROJECTION_OPS:
                        key = "outside any operator" if e.key == "forward" else e.key
                        ms = e.self_cpu_time_total / 1e3 / rounds
                        ops[name][key] = ops[name].get(key, 0.0) + ms
    return wall, proj, ops


def paired(wall: dict, a: str, b: str) -> tuple[float, float, float]:
    """Form a's ms minus form b's, round by round: (median, min, max) of the differences."""
    diffs = sorted(x - y for x, y in zip(wall[a], wall[b], strict=True))
    n = len(diffs)
    median = (diffs[(n - 1) // 2] + diffs[n // 2]) / 2
    return median, diffs[0], diffs[-1]
