"""backend_steps.py — chapter 12: xgrammar's two CPU apply backends timed inside engine steps.

The engine picks the apply backend with `backend_for(logits.device)`, which returns the
module's `CPU_BACKEND` for CPU logits. To time the other backend inside real engine steps, a
run sets `CPU_BACKEND` for its duration; every `apply_bitmask` call the engine makes is then
timed where it runs, inside `constrain_logits`, on the logits the forward has just written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from unittest import mock

from minillm.structured_output import bitmask as bitmask_py


def in_step_apply(
    make_engine: Callable, prompts: list, params: list, backend: str, apply: Callable
) -> dict:
    """One `make_engine().generate(prompts, params)` with CPU_BACKEND set to `backend`.

    `apply` is the unpatched `apply_bitmask`. Returns the milliseconds of every apply call
    inside the run's steps ("ms"), the rows each applied ("rows"), the backends `backend_for`
    named at those calls ("named") and every output's token ids ("tokens").
    """
    ms, rows_applied, named = [], [], set()

    def timed_apply(logits, bitmask, rows):
        named.add(bitmask_py.backend_for(logits.device))  # the engine's own choice, per call
        t0 = time.perf_counter()
        out = apply(logits, bitmask, rows)
        ms.append((time.perf_counter() - t0) * 1e3)
        rows_applied.append(len(rows))
        return out

    with (
        mock.patch.object(bitmask_py, "CPU_BACKEND", backend),
        mock.patch.object(bitmask_py, "apply_bitmask", timed_apply),
    ):
        outs = make_engine().generate(prompts, params)
    return {
        "ms": ms,
        "rows": rows_applied,
        "named": named,
        "tokens": [o.token_ids for o in outs],
    }
