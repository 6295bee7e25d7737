"""notebook/tp_ops.py — which parts of a decode forward shrink when a rank holds half the model.

    ops = decode_op_times(path, batch=8, prompt_len=32, steps=8)
    ops["whole"]["aten::addmm"], ops["shard"]["aten::addmm"]   # ms per forward

Chapter 10 finds rank 0's shard alone costing more than half of the whole model's forward at
decode. This module runs the whole model and rank 0's 1/2 shard (its collectives doing nothing,
`timing._NoPeers`) in two engines of this process, one torch thread, and profiles `steps` decode
steps of each with torch.profiler. Only the runner's forward is counted: each op's own CPU
time (`self_cpu_time_total`), summed by op name, per forward. The forward's own entry, "python
between ops", is the time inside the forward that no op claims: the Python of the model's code.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch

PYTHON = "python between ops"


def decode_op_times(
    path, batch: int, prompt_len: int, steps: int = 8, shard_of: int = 2
) -> dict[str, dict[str, float]]:
    """{"whole": {op: ms per forward}, "shard": {...}} over `steps` decode steps of `batch`
    requests with `prompt_len`-token prompts, after the prefill and one decode step."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from minillm.engine import LLMEngine
    from minillm.model import Transformer
    from minillm.parallel.timing import _NoPeers
    from minillm.sampling import SamplingParams

    greedy = SamplingParams(max_tokens=steps + 2, temperature=0.0, ignore_eos=True)
    prompts = [[(7 * r + 3 * i) % 1000 + 10 for i in range(prompt_len)] for r in range(batch)]
    sizes = dict(
        max_num_seqs=batch, max_num_batched_tokens=batch * prompt_len, block_size=16,
        num_blocks=batch * -(-(prompt_len + steps + 2) // 16),
    )  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    models = {
        "whole": path,
        "shard": Transformer.from_pretrained(path, tp=_NoPeers(0, shard_of)),
    }
    out = {}
    try:
        for name, model in models.items():
            with LLMEngine(model, **sizes) as engine:
                forward = engine.runner.forward

                def marked(batch_input, forward=forward):
                    with record_function(PYTHON):  # its self time: what no op claims
                        return forward(batch_input)

                engine.runner.forward = marked
                for p in prompts:
                    engine.add_request(p, greedy)
                engine.step()  # the prefills
                engine.step()  # one decode step to warm up
                with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
                    for _ in range(steps):
                        engine.step()
                out[name] = _per_op(prof.events(), steps)
    finally:
        torch.set_num_threads(threads)
    return out


@contextmanager
def _quiet_stderr():
    """The profiler's C++ side logs its start and stop to file descriptor 2, which a notebook
    shows: point it at /dev/null meanwhile."""
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _per_op(events, steps: int) -> dict[str, float]:
    """Self CPU ms per forward of every op inside the marked forwards, by name."""
    forwards = [e.time_range for e in events if e.name == PYTHON]
    per_op: dict[str, float] = {}
    for e in events:
        r = e.time_range
        if any(f.start <= r.start and r.end <= f.end for f in forwards):
            per_op[e.name] = per_op.get(e.name, 0.0) + e.self_cpu_time_total / 1e3 / steps
    return per_op


def print_op_table(ops: dict[str, dict[str, float]], top: int = 10, shrinks: float = 0.75):
    """The `top` ops by the whole model's time, then the forward split into the ops whose time
    fell below `shrinks` of the whole model's and the rest; returns (rest_whole, rest_shard,
    total_whole, total_shard) in ms per forward."""
    whole, shard = ops["whole"], ops["shard"]
    head = "op (self CPU time, ms per forward)"
    print(f"{head:<50}{'whole':>8}{'shard':>8}{'shard / whole':>15}")
    for name in sorted(whole, key=lambda n: -whole[n])[:top]:
        s = shard.get(name, 0.0)
        print(f"{name[:49]:<50}{whole[name]:>8.2f}{s:>8.2f}{s / whole[name]:>15.2f}")
    names = set(whole) | set(shard)
    small = {n for n in names if shard.get(n, 0.0) < shrinks * whole.get(n, 0.0)}
    parts = [
        sum(d.get(n, 0.0) for n in group)
        for group in (small, names - small)
        for d in (whole, shard)
    ]
    total_w, total_s = sum(whole.values()), sum(shard.values())
    print(
        f"{'ops that shrank below ' + str(shrinks):<50}{parts[0]:>8.2f}{parts[1]:>8.2f}"
        f"{parts[1] / parts[0]:>15.2f}"
    )
    print(
        f"{'everything else':<50}{parts[2]:>8.2f}{parts[3]:>8.2f}{parts[3] / parts[2]:>15.2f}"
    )
    print(f"{'the forward':<50}{total_w:>8.2f}{total_s:>8.2f}{total_s / total_w:>15.2f}")
    return parts[2], parts[3], total_w, total_s
