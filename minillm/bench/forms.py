"""bench/forms.py — one projection computed each way, for 1 to 16 rows, on 1 and on 2 threads.

A decode step's projections have a handful of rows, so each is bound by reading its weight:
weight bytes / time is the number to compare with the machine's streaming bandwidth. Three
forms:

- `F.linear`: MKL's product on the plain [out, in] weight. One row is a matrix-vector product,
  which runs on one core; 2 to 16 rows repack the weight on every call.
- `weight @ x.T`: the weight as the long left operand, the form the engine used before packing.
- `packed`: `minillm.model.linear`, oneDNN's linear on the weight packed once into blocks.

Each form is timed on weights that come from memory, as in a decode step, where every layer's
weights were evicted from the caches by the layers read since: the calls cycle through copies of
the weight that together exceed `COLD_BYTES`, so no call finds its weight in the last-level
cache. (Timed on one weight again and again, a 7 MB projection stays in a 32 MB cache and
reports more GB/s than the memory can deliver.)

Timings are never asserted; a busy machine only makes them noisy.
"""

from __future__ import annotations

import itertools
import time

import torch
import torch.nn.functional as F
from torch import nn

from minillm.bench.floor import STREAM_BYTES
from minillm.model import linear

COLD_BYTES = STREAM_BYTES  # copies of a weight together this large: each call reads memory

FORMS = {
    "F.linear": lambda x, w: F.linear(x, w),
    "weight @ x.T": lambda x, w: (w @ x.T).T,
    "packed": lambda x, w: linear(x, w),
}


def best_seconds(fn, budget_s: float, warmup: int = 1) -> float:
    """The best of repeated calls for about budget_s seconds (at least 3 calls), after
    `warmup` calls."""
    for _ in range(warmup):
        fn()
    best, spent, n = float("inf"), 0.0, 0
    while spent < budget_s or n < 3:
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best, spent, n = min(best, dt), spent + dt, n + 1
    return best


def cold_copies(n_out: int, n_in: int, g: torch.Generator) -> list[nn.Parameter]:
    """Copies of one random weight [n_out, n_in], enough of them to exceed COLD_BYTES
    together."""
    w = torch.randn(n_out, n_in, generator=g)
    count = max(2, -(-COLD_BYTES // (w.numel() * w.element_size())))
    return [nn.Parameter(w.clone()) for _ in range(count)]  # `linear` packs a Parameter


@torch.no_grad()
def form_times(
    shapes: dict, rows_list, threads_list, budget_s: float = 0.1, seed: int = 0
) -> list[dict]:
    """For each (name: (out, in)), thread count and row count, every form's best time and
    GB/s, each call on a weight that is not in the caches (`cold_copies`)."""
    before = torch.get_num_threads()
    g = torch.Generator().manual_seed(seed)
    out = []
    try:
        for name, (n_out, n_in) in shapes.items():
            copies = cold_copies(n_out, n_in, g)
            w = copies[0]
            gb = w.numel() * w.element_size() / 1e9
            for threads in threads_list:
                torch.set_num_threads(threads)
                for rows in rows_list:
                    x = torch.randn(rows, n_in, generator=g)
                    ref = F.linear(x, w)
                    row = dict(shape=name, threads=threads, rows=rows)
                    for form, fn in FORMS.items():
                        err = (fn(x, w) - ref).abs().max().item()
                        if err > 1e-3 * max(1.0, ref.abs().max().item()):
                            raise AssertionError(
                                f"{form} differs from F.linear by {err:.2e} on {name}"
                            )
                        turn = itertools.count()  # the next copy, round and round

                        def call(fn=fn, x=x, turn=turn, copies=copies):
                            return fn(x, copies[next(turn) % len(copies)])

                        # the warm-up visits every copy once (packing happens there)
                        s = best_seconds(call, budget_s, warmup=len(copies))
                        row[form] = dict(ms=s * 1e3, gb_per_s=gb / s)
                    out.append(row)
    finally:
        torch.set_num_threads(before)
    return out


def print_forms(table: list[dict]) -> None:
    print(
        "one projection, each form (best of repeated calls, each on a weight read from memory; "
        "GB/s = weight bytes / time):"
    )
    head = f"{'weight':>18} | {'threads':>7} | {'rows':>4} | "
    head += " | ".join(f"{f:>19}" for f in FORMS)
    print(head + "\n" + "-" * len(head))
    for r in table:
        cells = [f"{r[f]['ms']:8.2f} ms {r[f]['gb_per_s']:4.1f} GB/s" for f in FORMS]
        print(f"{r['shape']:>18} | {r['threads']:>7} | {r['rows']:>4} | " + " | ".join(cells))
    print()
