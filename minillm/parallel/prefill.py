"""parallel/prefill.py — where tensor parallelism pays on this machine: prefill steps, measured.

On this machine a decode step's all-reduces cost more than halving its compute saves (chapter
10, section 6, measures both). A prefill step of `batch x prompt_len` tokens computes
`prompt_len` times as much per all-reduce. `prefill_step_times` times such steps at a given
tensor_parallel_size, so a TP=1 and a TP=2 run can be set side by side at several prompt
lengths. The threads are the same at every size: this process (rank 0, or the whole model at
TP=1) runs half the machine's cores' worth of torch threads, as each of TP=2's two ranks does,
so TP=1 is one device and TP=2 adds a second rather than splitting one; `threads` overrides it
(all the cores at TP=1: one process using what TP=2's two ranks use).
Each step is split on rank 0's clock (`PrefillStep`): its compute, its time inside the
all-reduces and the logits' gather, the hand-over, and the rest of the engine's step; with
`shard_of=N` one process runs rank 0's 1/N shard alone (`timing._NoPeers`), so the shard's
compute can be set against half the forward.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from minillm.checking import check_int


@dataclass
class PrefillStep:
    """One prefill step, on rank 0's clock, in seconds."""

    step_s: float  # engine.step(), as the caller sees it
    forward_s: float  # the runner's forward: at TP=N, the hand-over to the workers included
    send_s: float = 0.0  # at TP=N: rank 0 preparing the batch and handing it to the workers
    all_reduce_s: float = 0.0  # rank 0 inside the all-reduces, waiting for the others included
    waiting_s: float = 0.0  # the part of all_reduce_s before the last rank entered each call
    gather_s: float = 0.0  # rank 0 inside the logits' gather
    peer_start_s: float = 0.0  # the latest other rank: from rank 0 sending to it starting
    peer_compute_s: float = 0.0  # the slowest other rank's forward outside its collectives

    @property
    def compute_s(self) -> float:
        """Rank 0's forward outside the collectives and the hand-over."""
        return self.forward_s - self.send_s - self.all_reduce_s - self.gather_s

    @property
    def rest_s(self) -> float:
        """The engine's step outside the forward: scheduling, sampling, bookkeeping."""
        return self.step_s - self.forward_s


def prefill_step_times(
    path,
    tensor_parallel_size: int,
    batch: int,
    prompt_lens: list[int],
    repeats: int = 3,
    shard_of: int = 1,
    threads: int | None = None,
) -> dict[int, list[PrefillStep]]:
    """`repeats` prefill steps of `batch` prompts of each length in `prompt_lens`, in one
    engine: each step prefills every prompt whole and samples one token, which ends the
    requests (no prefix cache, and fresh token ids each repeat). One warm-up step first. With
    `shard_of` N > 1 (at tensor_parallel_size 1) the model is rank 0's 1/N shard, its
    collectives doing nothing: its logits are not the model's, its compute is one rank's
    share. `threads` sets rank 0's torch threads (by default half the machine's cores, as each
    rank gets): at tensor_parallel_size 1, all the cores make the one-process baseline that
    uses what TP=2's two ranks use."""
    from minillm.engine import LLMEngine
    from minillm.model import Transformer
    from minillm.parallel.timing import _NoPeers
    from minillm.sampling import SamplingParams

    check_int("batch", batch, min=1)
    check_int("repeats", repeats, min=1)
    check_int("shard_of", shard_of, min=1)
    if shard_of > 1 and tensor_parallel_size != 1:
        raise ValueError(
            f"shard_of {shard_of} with tensor_parallel_size {tensor_parallel_size}: "
            "a shard alone runs in one process, expected tensor_parallel_size 1"
        )
    lens = [check_int("prompt_len", n, min=1) for n in prompt_lens]
    longest = max(lens)
    one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    before = torch.get_num_threads()
    if threads is not None:
        check_int("threads", threads, min=1)
    torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // 2))
    times: dict[int, list[PrefillStep]] = {n: [] for n in lens}
    try:
        model = (
            Transformer.from_pretrained(path, tp=_NoPeers(0, shard_of))
            if shard_of > 1
            else path
        )
        with LLMEngine(
            model, tensor_parallel_size=tensor_parallel_size, max_num_seqs=batch,
            max_num_batched_tokens=batch * longest, block_size=16,
            num_blocks=batch * -(-(longest + 1) // 16),
        ) as engine:  # fmt: skip
            tp = getattr(engine.model, "tp", None)  # None in one whole model: no collectives
            if tp is not None:
                tp.stats.record_calls = True  # rank 0's (entered, left) of each collective
            forward, clocked = engine.runner.forward, [0.0]

            def timed(batch_input):
                start = time.perf_counter()
                logits = forward(batch_input)
                clocked[0] = time.perf_counter() - start
                return logits

            engine.runner.forward = timed
            for k, n in enumerate([lens[0]] + [n for n in lens for _ in range(repeats)]):
                for r in range(batch):  # fresh ids: no two prompts or repeats alike
                    engine.add_request([(7 * r + 3 * i + k) % 1000 + 10 for i in range(n)], one)
                if tp is not None:
                    tp.stats.reset()
                start = time.perf_counter()
                engine.step()  # every prompt whole, then its one token: the requests end
                seconds = time.perf_counter() - start
                if engine.has_unfinished():
                    raise RuntimeError(f"{batch} x {n} tokens did not fit one prefill step")
                if k:  # step 0 is the warm-up
                    times[n].append(_split(engine, tp, seconds, clocked[0]))
    finally:
        torch.set_num_threads(before)
    return times


def _split(engine, tp, step_s: float, forward_s: float) -> PrefillStep:
    """The step just run, split on rank 0's clock (the workers asked after it ended)."""
    from minillm.parallel.timing import waiting_and_transfer

    if tp is None:
        return PrefillStep(step_s, forward_s)
    n = tp.stats.all_reduce  # the all-reduces come first, the logits' gather last
    calls = tp.stats.calls
    reduce_s = sum(b - a for a, b in calls[:n])
    gather_s = sum(b - a for a, b in calls[n:])
    workers = getattr(engine.runner, "workers", None)  # absent for a shard alone
    if workers is None:
        return PrefillStep(step_s, forward_s, 0.0, reduce_s, 0.0, gather_s)
    peers = workers.times()  # each worker's clock of its own forward (RankTimes)
    waiting = waiting_and_transfer([calls[:n]] + [w.calls[:n] for w in peers])[0][0]
    return PrefillStep(
        step_s, forward_s, engine.runner.send_s, reduce_s, waiting, gather_s,
        max(w.handover_s for w in peers), max(w.forward_s - w.collectives_s for w in peers),
    )  # fmt: skip
