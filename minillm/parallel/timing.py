"""parallel/timing.py — what tensor parallelism costs on this machine, measured.

The measurements of chapter 10's section 6. `time_all_reduce` starts a gloo group
of `world_size` processes and times `torch.distributed.all_reduce` itself, per call, for each
message size (after a barrier, so every rank starts the call together; the fastest call
counts, or the median with `statistic="median"`; `all_reduce_times` returns every call).
`decode_step_times` times the engine's decode steps at a given `tensor_parallel_size`, so the
two can be set side by side: a step at TP=N is its compute divided by N, plus 2L + 1
all-reduces, plus the cost of handing the step to the workers. `decode_step_split` splits each
step on every rank: the hand-over, each rank's forward, and its time inside the collectives.
Every rank also reads, around each collective and over the step, how long its threads were
ready to run but waited for a core (`run_queue_s`, Linux's schedstat).
`decode_forward_times` clocks the forward inside each step of one process, of the whole model or
of rank 0's shard run alone (its collectives no-ops), so the compute's share can be set apart.
Two measurements then isolate why a TP=2 step on a small CPU costs more than those parts:
`concurrent_shard_forward_times` runs every rank's shard at once with no communication (the
compute's contention alone), and `all_reduce_between_times` puts a layer's share of compute
between all-reduces (the collectives' cost when the ranks do not sit waiting in them).
`all_reduce_two_ways` times one message size with and without a barrier before each call,
alternating in one group, so the two ways meet the same machine.
`interleaved.py` takes TP=1 and TP=2 decode steps in turn with each rank on its own core; with
`pin`, `all_reduce_between_times` runs its ranks on their own cores the same way.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.nn.functional as F

from minillm.checking import check_int
from minillm.parallel.collectives import HOST
from minillm.parallel.layers import TensorParallelGroup
from minillm.parallel.processes import cores_of, end_processes, run_queue_s, start_without_main
from minillm.parallel.workers import RankTimes

STORE_TIMEOUT_S = 300  # spawned ranks import torch first: slow on a loaded machine


def _join_group(rank: int, size: int, port: int) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    timeout = timedelta(seconds=STORE_TIMEOUT_S)
    store = dist.TCPStore(HOST, port, size + 1, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)


def _time_rank(rank, size, port, sizes, repeats, conn) -> None:
    import torch.distributed as dist

    _join_group(rank, size, port)
    per_size = {}
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4))  # float32
        times = []
        for i in range(repeats + 3):  # the first calls set up connections and buffers
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            if i >= 3:
                times.append(time.perf_counter() - start)
        per_size[nbytes] = times
    conn.send(per_size)
    dist.destroy_process_group()
    conn.close()


def time_all_reduce(
    sizes, world_size: int = 2, repeats: int = 20, statistic: str = "fastest"
) -> dict[int, float]:
    """Seconds of one gloo all-reduce of each message size (bytes, float32), as rank 0 sees it:
    the fastest of `repeats` calls after three warm-up calls (the call least disturbed by other
    work on the machine), or their median with `statistic="median"`."""
    if statistic not in ("fastest", "median"):
        raise ValueError(f"statistic {statistic!r}: expected 'fastest' or 'median'")
    keep = min if statistic == "fastest" else statistics.median
    times = all_reduce_times(sizes, world_size, repeats)
    return {nbytes: keep(calls) for nbytes, calls in times.items()}


def all_reduce_times(sizes, world_size: int = 2, repeats: int = 20) -> dict[int, list[float]]:
    """Seconds of each of `repeats` gloo all-reduces of each message size (bytes, float32), as
    rank 0 sees them, in the order they ran, after three warm-up calls."""
    check_int("world_size", world_size, min=2)
    check_int("repeats", repeats, min=1)
    bad = [s for s in sizes if isinstance(s, bool) or not isinstance(s, int) or s < 4]
    if bad:
        raise ValueError(f"message size {bad[0]!r}: expected an int of at least 4 bytes")
    port, store = _store(world_size)
    procs, conns = _start_ranks(
        _time_rank, [(r, world_size, port, list(sizes), repeats) for r in range(world_size)]
    )
    times = _join_all(procs, conns)[0]
    del store  # the ranks met at it: kept until they answered
    return times


def _store(world_size: int):
    """(port, the TCPStore every rank meets at); the caller keeps it until the ranks answer."""
    import torch.distributed as dist

    store = dist.TCPStore(
        HOST, 0, world_size + 1, is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=STORE_TIMEOUT_S),
    )  # fmt: skip
    return store.port, store


def _start_ranks(target, per_rank: list[tuple]) -> tuple[list, list]:
    """One process per entry of `per_rank`, running target(*args, conn); spawned, so that no
    thread of this process (a kernel's, a gloo group's) is forked with a lock held."""
    ctx = mp.get_context("spawn")
    procs, conns = [], []
    for args in per_rank:
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=target, args=(*args, theirs), daemon=True)
        start_without_main(p)
        theirs.close()
        procs.append(p)
        conns.append(mine)
    return procs, conns


def decode_step_times(
    path, tensor_parallel_size: int, batch: int, prompt_len: int, steps: int
) -> list[float]:
    """Seconds of each decode step of `batch` requests with `prompt_len`-token prompts (greedy,
    `steps` new tokens each), at the given tensor_parallel_size. Every rank, the engine's
    process included, gets half the machine's cores whatever the size, as one GPU is one GPU:
    TP=2 adds a second device rather than splitting one."""
    return [
        s.step_s
        for s in decode_step_split(path, tensor_parallel_size, batch, prompt_len, steps)
    ]


@dataclass
class StepSplit:
    """One decode step at tensor_parallel_size N, clocked on every rank."""

    step_s: float  # the engine's step, as the caller sees it
    send_s: float  # rank 0 preparing the batch and handing it to the workers
    workers: list[RankTimes]  # ranks 1 .. N-1, their own clocks of the same step
    calls: list[tuple[float, float]]  # rank 0's (entered, left) of each collective, in order
    queued: list[float] = field(default_factory=list)  # rank 0's run-queue s in each call
    queued_s: float = 0.0  # run-queue seconds of all rank 0's threads over the step

    @property
    def collectives_s(self) -> float:
        """Rank 0's time inside the all-reduces and the logits' gather."""
        return sum(left - entered for entered, left in self.calls)

    def waiting(self) -> list[tuple[float, float]]:
        """(waiting, in the transfer) seconds of each rank, rank 0 first, summed over the
        step's collectives. A rank waits from entering a collective until the last rank enters
        it; what it spends inside after that is the transfer. Every rank calls the same
        collectives in the same order, and all ranks read one clock, so the calls line up."""
        return waiting_and_transfer([self.calls] + [w.calls for w in self.workers])


def waiting_and_transfer(ranks: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """(waiting, in the transfer) seconds of each rank, summed over the collectives: `ranks[i]`
    is rank i's (entered, left) of each call, on the clock every process shares."""
    if len({len(calls) for calls in ranks}) != 1:
        raise ValueError(f"the ranks made {[len(c) for c in ranks]} collective calls")
    totals = [[0.0, 0.0] for _ in ranks]
    for meeting in zip(*ranks):  # one collective: (entered, left) on each rank
        last_in = max(entered for entered, _ in meeting)
        for total, (entered, left) in zip(totals, meeting):
            # capped by the call: a gather's sender may leave before the last rank arrives
            wait = min(left - entered, max(0.0, last_in - entered))
            total[0] += wait
            total[1] += left - entered - wait
    return [(w, t) for w, t in totals]


def decode_step_split(
    path, tensor_parallel_size: int, batch: int, prompt_len: int, steps: int
) -> list[StepSplit]:
    """Each decode step of `decode_step_times`, split on every rank. Rank 0's time inside the
    collectives is the transfer plus waiting for the other ranks to arrive: they start a step
    after the hand-over and compute their own share. At size 1 only step_s is nonzero."""
    from minillm.engine import LLMEngine
    from minillm.sampling import SamplingParams

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    greedy = SamplingParams(max_tokens=steps + 1, temperature=0.0, ignore_eos=True)
    prompts = [[(7 * r + 3 * i) % 1000 + 10 for i in range(prompt_len)] for r in range(batch)]
    split = []
    try:
        with LLMEngine(
            path, tensor_parallel_size=tensor_parallel_size, max_num_seqs=batch,
            max_num_batched_tokens=batch * prompt_len, block_size=16,
            num_blocks=batch * -(-(prompt_len + steps + 1) // 16),
        ) as engine:  # fmt: skip
            for p in prompts:
                engine.add_request(p, greedy)
            engine.step()  # the prefills
            tp = engine.model.tp  # None in one process: nothing to wait for
            if tp is not None:
                tp.stats.record_calls = True  # rank 0's; the workers keep their last forward's
            while engine.has_unfinished():
                if tp is not None:
                    tp.stats.reset()
                queued, start = run_queue_s(all_threads=True), time.perf_counter()
                engine.step()
                step_s = time.perf_counter() - start
                queued = run_queue_s(all_threads=True) - queued
                if tp is None:
                    split.append(StepSplit(step_s, 0.0, [], [], [], queued))
                    continue
                workers = engine.runner.workers.times()  # asked after the clock stopped
                split.append(
                    StepSplit(
                        step_s, engine.runner.send_s, workers, tp.stats.calls, tp.stats.queued,
                        queued,
                    )
                )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    return split


class _NoPeers(TensorParallelGroup):
    """Rank 0 of `size`, alone: its all-reduces return its own partial sum and its gather
    repeats its own slice of the logits. The shard's compute at full speed, with no other rank
    to wait for or to share the machine with; its logits are not the model's."""

    def sum_over_ranks(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def gather_to_first(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x] * self.size

    def gather_last_dim(self, x: torch.Tensor, total: int) -> torch.Tensor:
        out = super().gather_last_dim(x, total)  # None past rank 0: every rank here samples
        return torch.cat([x] * self.size, dim=-1)[..., :total] if out is None else out


def decode_forward_times(
    path, batch: int, prompt_len: int, steps: int, shard_of: int = 1
) -> list[tuple[float, float]]:
    """(step, forward) seconds of each decode step in one process, with the threads of
    `decode_step_times`; forward is `ModelRunner.forward` (preparing the batch, the model).
    With `shard_of` N > 1 the model is rank 0's 1/N shard and its collectives do nothing
    (`_NoPeers`): what one rank's share of the forward costs when it runs alone."""
    check_int("shard_of", shard_of, min=1)
    return _forward_times(path, batch, prompt_len, steps, 0, shard_of)


def _forward_times(path, batch, prompt_len, steps, rank, size, before=None):
    from minillm.engine import LLMEngine
    from minillm.model import Transformer
    from minillm.sampling import SamplingParams

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    greedy = SamplingParams(max_tokens=steps + 1, temperature=0.0, ignore_eos=True)
    prompts = [[(7 * r + 3 * i) % 1000 + 10 for i in range(prompt_len)] for r in range(batch)]
    times = []
    try:
        tp = _NoPeers(rank, size) if size > 1 else None
        with LLMEngine(
            Transformer.from_pretrained(path, tp=tp), max_num_seqs=batch,
            max_num_batched_tokens=batch * prompt_len, block_size=16,
            num_blocks=batch * -(-(prompt_len + steps + 1) // 16),
        ) as engine:  # fmt: skip
            forward, clocked = engine.runner.forward, [0.0]

            def timed(batch_input):
                start = time.perf_counter()
                logits = forward(batch_input)
                clocked[0] = time.perf_counter() - start
                return logits

            engine.runner.forward = timed
            for p in prompts:
                engine.add_request(p, greedy)
            engine.step()  # the prefills
            if before is not None:
                before()  # e.g. a barrier: every rank's decode steps run at the same time
            while engine.has_unfinished():
                start = time.perf_counter()
                engine.step()
                times.append((time.perf_counter() - start, clocked[0]))
    finally:
        torch.set_num_threads(threads)
    return times


def _shard_rank(path, rank, size, batch, prompt_len, steps, barrier, conn) -> None:
    conn.send(_forward_times(path, batch, prompt_len, steps, rank, size, barrier.wait))
    conn.close()


def _join_all(procs, conns, timeout_s: float = 300.0) -> list:
    try:
        for c in conns:
            if not c.poll(timeout_s):
                raise TimeoutError(f"the timing processes did not answer within {timeout_s} s")
        return [c.recv() for c in conns]
    finally:
        end_processes(procs, conns, grace_s=10.0)


def concurrent_shard_forward_times(
    path, batch: int, prompt_len: int, steps: int, size: int = 2
) -> list[list[tuple[float, float]]]:
    """`decode_forward_times` of every rank's 1/size shard at once, one process per rank, with
    the same threads each and the collectives doing nothing: rank r's (step, forward) seconds of
    each decode step. A TP=size run without its communication, so what is left is the ranks'
    compute sharing the machine."""
    check_int("size", size, min=2)
    barrier = mp.get_context("spawn").Barrier(size)
    procs, conns = _start_ranks(
        _shard_rank,
        [(str(path), r, size, batch, prompt_len, steps, barrier) for r in range(size)],
    )
    return _join_all(procs, conns)


def _between_rank(rank, size, port, nbytes, calls, work, repeats, pin, conn) -> None:
    import torch.distributed as dist

    if pin:  # before the group starts its threads: they inherit this thread's cores
        os.sched_setaffinity(0, cores_of(rank, size))
    _join_group(rank, size, port)
    x = torch.ones(max(1, nbytes // 4))  # float32
    tokens, inp, out = work or (1, 1, 1)
    h, w = torch.randn(tokens, inp), torch.randn(out, inp)
    sequences = []
    for i in range(repeats + 1):  # the first sequence sets up connections and buffers
        dist.barrier()  # once per sequence, not per call: inside it the ranks run freely
        seq = []
        for _ in range(calls):
            if work is not None:
                F.linear(h, w)  # [tokens, out]: this rank's compute before the next meeting
            start = time.perf_counter()
            dist.all_reduce(x)
            seq.append((start, time.perf_counter()))
        if i:
            sequences.append(seq)
    conn.send(sequences)
    dist.destroy_process_group()
    conn.close()


def all_reduce_between_times(
    nbytes: int,
    calls: int,
    work: tuple[int, int, int] | None,
    repeats: int = 10,
    world_size: int = 2,
    pin: bool = False,
) -> list[list[tuple[float, float]]]:
    """`repeats` sequences of `calls` gloo all-reduces of `nbytes` (float32) with no barrier
    between the calls; with `work` = (tokens, in, out), each rank multiplies [tokens, in] by a
    weight [out, in] before each call, as a forward computes between its all-reduces. With
    `pin`, rank r's threads run on `cores_of(r, world_size)` only. Returns each sequence's
    `waiting_and_transfer` per rank: (waiting, in the transfer) s summed over its calls."""
    check_int("calls", calls, min=1)
    check_int("repeats", repeats, min=1)
    check_int("world_size", world_size, min=2)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4:
        raise ValueError(f"message size {nbytes!r}: expected an int of at least 4 bytes")
    if work is not None:
        if len(work) != 3:
            raise ValueError(f"work {work!r}: expected (tokens, in, out)")
        work = tuple(check_int("work", n, min=1) for n in work)
    port, store = _store(world_size)
    procs, conns = _start_ranks(
        _between_rank,
        [(r, world_size, port, nbytes, calls, work, repeats, pin) for r in range(world_size)],
    )
    per_rank = _join_all(procs, conns)  # [rank][sequence][call] = (entered, left)
    del store
    return [waiting_and_transfer(list(seq)) for seq in zip(*per_rank)]


def _two_ways_rank(rank, size, port, nbytes, calls, rounds, conn) -> None:
    import torch.distributed as dist

    _join_group(rank, size, port)
    x = torch.ones(max(1, nbytes // 4))  # float32
    ways = {"barrier before each call": [], "back to back": []}
    for i in range(rounds + 1):  # the first round sets up connections and buffers
        for way, seqs in ways.items():
            dist.barrier()  # both ways start a sequence together
            seq = []
            for _ in range(calls):
                if way == "barrier before each call":
                    dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(x)
                seq.append((start, time.perf_counter()))
            if i:
                seqs.append(seq)
    conn.send(ways)
    dist.destroy_process_group()
    conn.close()


def all_reduce_two_ways(
    nbytes: int, calls: int, rounds: int = 10, world_size: int = 2
) -> dict[str, list[list[list[tuple[float, float]]]]]:
    """The same gloo all-reduce of `nbytes` (float32) timed two ways in one group, alternating:
    a sequence of `calls` with a barrier before each call, then `calls` back to back, `rounds`
    times after a warm-up round. Returns, for each way, every sequence's calls, each call as
    `waiting_and_transfer` per rank: [(waiting, both there) of rank 0, of rank 1, ...]."""
    check_int("calls", calls, min=1)
    check_int("rounds", rounds, min=1)
    check_int("world_size", world_size, min=2)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4:
        raise ValueError(f"message size {nbytes!r}: expected an int of at least 4 bytes")
    port, store = _store(world_size)
    procs, conns = _start_ranks(
        _two_ways_rank,
        [(r, world_size, port, nbytes, calls, rounds) for r in range(world_size)],
    )
    per_rank = _join_all(procs, conns)  # [rank][way][sequence][call] = (entered, left)
    del store
    return {
        way: [
            [waiting_and_transfer([[call] for call in meeting]) for meeting in zip(*seqs)]
            for seqs in zip(*(r[way] for r in per_rank))
        ]
        for way in per_rank[0]
    }
