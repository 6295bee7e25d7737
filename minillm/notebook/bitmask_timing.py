"""bitmask_timing.py — chapter 12's timer for the steps of xgrammar's `torch_native` apply.

The chapter prints only the table; the timed steps live here, so that the chapter does not show
the unpack its `apply-bitmask` exercise asks the learner to write.
"""

from __future__ import annotations

import statistics
import time

import torch

STEPS = ("unpack", "gather", "masked_fill_", "scatter")


def torch_native_steps(rows: torch.Tensor, vocab: int, reps: int = 25) -> dict[str, float]:
    """Median milliseconds of each step of xgrammar 0.2.9's `torch_native` apply with `indices`
    (apply_token_bitmask_inplace_kernel_indices_torch), on r rows of float32 logits:

    unpack        the packed rows [r, W] into flags of the forbidden tokens [r, vocab]
    gather        logits[indices, :vocab], copied out of the logits
    masked_fill_  -inf written through the flags into that copy
    scatter       the copy written back: logits[indices, :vocab] = copy
    """
    indices = list(range(rows.shape[0]))
    logits = torch.randn(rows.shape[0], vocab)
    times: dict[str, list[float]] = {s: [] for s in STEPS}
    for _ in range(reps):
        x = logits.clone()
        t0 = time.perf_counter()
        shifts = torch.arange(32, dtype=torch.int32).repeat(rows.shape[1])  # [32 W]
        bits = (torch.repeat_interleave(rows[indices], 32, dim=-1) >> shifts) & 1  # [r, 32 W]
        forbidden = bits[..., :vocab] == 0  # [r, vocab]
        t1 = time.perf_counter()
        part = x[indices, :vocab]  # [r, vocab], a copy
        t2 = time.perf_counter()
        part.masked_fill_(forbidden, float("-inf"))
        t3 = time.perf_counter()
        x[indices, :vocab] = part
        t4 = time.perf_counter()
        for step, dt in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            times[step].append(dt)
    return {s: statistics.median(ts) * 1e3 for s, ts in times.items()}
