"""parallel/interleaved.py — TP=1 and TP=2 decode steps in turn, each rank on its own core.

    steps = interleaved_decode_steps(path, batch=8, prompt_len=32, steps=8)
    steps.tp1[i], steps.shard[i], steps.tp2[i]   # decode step i of each, run one after another

Three engines live at once in this process: the whole model (TP=1), rank 0's shard alone with
its collectives doing nothing (what a rank's share of the forward costs), and a TP=2 engine with
one worker. Decode step i of each runs right after step i of the others, the order rotating,
so all three meet the same machine. With `pin`, this process's threads run on rank 0's cores
and the worker's on rank 1's (`cores_of`), one torch thread per core: the two ranks never wait
for each other's core, only for their own gloo threads'. TP=1 runs on rank 0's cores, as one GPU
is one GPU and TP=2 adds a second.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from minillm.parallel.processes import cores_of, pin_threads, run_queue_s
from minillm.parallel.timing import StepSplit, _NoPeers


@dataclass
class Interleaved:
    """Seconds of each decode step of the three engines, in step order."""

    tp1: list[tuple[float, float, float]]  # (step, forward, run-queue of all threads)
    shard: list[tuple[float, float, float]]  # rank 0's shard alone: the same three
    tp2: list[StepSplit]  # clocked on both ranks
    tp2_forward: list[float]  # rank 0's forward inside each TP=2 step, collectives included
    pinned: bool


def interleaved_decode_steps(
    path, batch: int, prompt_len: int, steps: int, pin: bool = True
) -> Interleaved:
    """`steps` decode steps of `batch` requests with `prompt_len`-token prompts (greedy) at
    TP=1, on rank 0's shard alone and at TP=2, step i of each taken in turn."""
    from minillm.engine import LLMEngine
    from minillm.model import Transformer
    from minillm.sampling import SamplingParams

    greedy = SamplingParams(max_tokens=steps + 1, temperature=0.0, ignore_eos=True)
    prompts = [[(7 * r + 3 * i) % 1000 + 10 for i in range(prompt_len)] for r in range(batch)]
    sizes = dict(
        max_num_seqs=batch, max_num_batched_tokens=batch * prompt_len, block_size=16,
        num_blocks=batch * -(-(prompt_len + steps + 1) // 16),
    )  # fmt: skip
    threads, mask = torch.get_num_threads(), os.sched_getaffinity(0)
    torch.set_num_threads(len(cores_of(0, 2)))  # a rank's cores, one thread each
    engines = {}
    try:
        engines["tp1"] = LLMEngine(path, **sizes)
        engines["shard"] = LLMEngine(
            Transformer.from_pretrained(path, tp=_NoPeers(0, 2)), **sizes
        )
        engines["tp2"] = LLMEngine(path, tensor_parallel_size=2, **sizes)
        forward_s = {name: _clock_forward(e.runner) for name, e in engines.items()}
        for e in engines.values():
            for p in prompts:
                e.add_request(p, greedy)
            e.step()  # the prefills; every thread of both ranks exists by now
        tp = engines["tp2"].model.tp
        tp.stats.record_calls = True
        if pin:
            pin_threads(os.getpid(), cores_of(0, 2))
            pin_threads(engines["tp2"]._tp_workers.pids[0], cores_of(1, 2))
        out = Interleaved([], [], [], [], pin)
        for i in range(steps):
            for name in [("tp1", "shard", "tp2")[(i + k) % 3] for k in range(3)]:
                e = engines[name]
                tp.stats.reset()
                queued, start = run_queue_s(all_threads=True), time.perf_counter()
                e.step()
                step_s = time.perf_counter() - start
                queued = run_queue_s(all_threads=True) - queued
                if name != "tp2":
                    getattr(out, name).append((step_s, forward_s[name][0], queued))
                    continue
                workers = e.runner.workers.times()  # asked after the clock stopped
                out.tp2.append(
                    StepSplit(step_s, e.runner.send_s, workers, tp.stats.calls, tp.stats.queued,
                              queued)
                )  # fmt: skip
                out.tp2_forward.append(forward_s[name][0])
        assert not any(e.has_unfinished() for e in engines.values())
        return out
    finally:
        for e in engines.values():
            e.close()
        pin_threads(os.getpid(), mask)
        torch.set_num_threads(threads)


def _clock_forward(runner) -> list[float]:
    """Wrap `runner.forward` so that each call's seconds land in the returned one-item list."""
    forward, clocked = runner.forward, [0.0]

    def timed(batch_input):
        start = time.perf_counter()
        logits = forward(batch_input)
        clocked[0] = time.perf_counter() - start
        return logits

    runner.forward = timed
    return clocked
