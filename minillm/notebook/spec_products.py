"""notebook/spec_products.py — chapter 9, section 2: one weight matrix against its rows.

A product through `linear` (the call every projection of the engine makes) is timed at a few
row counts, and two rates are measured apart from those timings: the read rate (one row, where
the weight's read is nearly all the work) and the arithmetic rate (128 to 512 rows, where the
arithmetic dwarfs the one read). The chapter then predicts 40 rows from the two rates and
compares the prediction with the 40 rows it timed, which neither rate was measured on.
"""

from __future__ import annotations

import statistics
import time

import torch

from minillm.linear import linear

ROWS = (1, 2, 5, 8, 40)  # the timed row counts: one decode row up to a batch-8 verify of k = 4
ARITHMETIC_ROWS = (128, 256, 512)  # where the arithmetic outlasts the read many times over


def product_ms(w: torch.Tensor, rows: int, reps: int) -> tuple[float, float, float]:
    """The median ms of `reps` calls of linear([rows, in], w), each timed alone (one
    preempted call moves the median little), and the quartiles of those calls."""
    x = torch.randn(rows, w.shape[1])
    for _ in range(3):
        linear(x, w)  # warm-up: kernel choice
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        linear(x, w)
        times.append(time.perf_counter() - t0)
    q1, med, q3 = statistics.quantiles(times, n=4)
    return med * 1e3, q1 * 1e3, q3 * 1e3


def arithmetic_gflops(w: torch.Tensor, reps: int = 5) -> tuple[float, int]:
    """The best rate over ARITHMETIC_ROWS (best of `reps` calls each): 2 operations per weight
    and row. At these row counts one read of the weight is a small part of the call, so this is
    (just below) the kernel's arithmetic rate. Returns (GFLOP/s, the rows that reached it)."""
    best = (0.0, 0)
    for rows in ARITHMETIC_ROWS:
        x = torch.randn(rows, w.shape[1])
        linear(x, w)
        s = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            linear(x, w)
            s = min(s, time.perf_counter() - t0)
        best = max(best, (2 * rows * w.numel() / s / 1e9, rows))
    return best


def measure(name: str, out_features: int, in_features: int, reps: int) -> dict:
    """One fp32 weight as a model holds it (a Parameter, packed once by `linear`): the timed
    rows, the two rates, and the 40-row time they predict."""
    w = torch.nn.Parameter(torch.randn(out_features, in_features), requires_grad=False)
    timed = {rows: product_ms(w, rows, reps) for rows in ROWS}
    ms1 = timed[1][0]
    read_gbs = w.numel() * 4 / ms1 / 1e6  # bytes of fp32 weight per second of one row
    gflops, at_rows = arithmetic_gflops(w)
    # 40 rows: the arithmetic alone at that rate, and the read alone (one row's time)
    arith40_ms = 2 * 40 * w.numel() / (gflops * 1e9) * 1e3
    return dict(
        name=name,
        shape=tuple(w.shape),
        mb=w.numel() * 4 / 1e6,
        ms=timed,  # rows -> (median, q1, q3) ms
        read_gbs=read_gbs,
        gflops=gflops,
        gflops_rows=at_rows,
        ops_per_byte=gflops / read_gbs,  # the machine's balance, for this weight
        arith40=arith40_ms / ms1,  # 40 rows' arithmetic alone, in one-row times
        measured40=timed[40][0] / ms1,
    )


def print_products(results: list[dict]) -> None:
    for r in results:
        ms = r["ms"]
        m1, q1, q3 = ms[1]
        print(
            f"{r['name']}, {r['shape']}, {r['mb']:.0f} MB: one row {m1:.2f} ms (middle half "
            f"of its calls {q1 / m1:.2f}x to {q3 / m1:.2f}x the median; "
            f"{r['read_gbs']:.1f} GB/s); "
            + ", ".join(f"{n} rows {ms[n][0] / m1:.1f}x" for n in ROWS[1:])
        )
        print(
            f"  arithmetic rate {r['gflops']:.0f} GFLOP/s (best of {ARITHMETIC_ROWS[0]} to "
            f"{ARITHMETIC_ROWS[-1]} rows, at {r['gflops_rows']}): {r['ops_per_byte']:.1f} "
            f"operations per byte, so the arithmetic outlasts the read past "
            f"{r['ops_per_byte'] / 0.5:.0f} rows (0.5 operations per byte and row)"
        )
        print(
            f"  40 rows: the arithmetic alone at that rate {r['arith40']:.1f}x one row, the "
            f"read alone 1.0x; measured {r['measured40']:.1f}x"
        )
