"""parallel/timing.py — what tensor parallelism's collectives cost on this machine, measured.

The all-reduce measurements of chapter 10's section 6, each in a gloo group of `world_size`
spawned processes. `all_reduce_times` times `torch.distributed.all_reduce` itself, every call of
each message size (after a barrier, so every rank starts the call together).
`all_reduce_between_times` runs a sequence of all-reduces (chapter 10: a decode step's 2L + 1)
with no barrier between the calls, with or without a layer's share of compute before each, and
with `pin` each rank on its own cores (`cores_of`).
`all_reduce_two_ways` times one message size with and without a barrier before each call,
alternating in one group, so the two ways meet the same machine. `waiting_and_transfer` splits
each rank's time inside the collectives into waiting for the last rank to arrive and the
transfer after it.
For the engine's decode and prefill steps: `StepSplit` is one decode step clocked on every rank
(the hand-over, each rank's collectives and its run-queue wait, Linux's schedstat), which
`interleaved.py` fills, and `_NoPeers` is rank 0's shard alone, its collectives doing nothing,
which `interleaved.py` and `prefill.py` run to clock one rank's share of the forward.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.nn.functional as F

from minillm.checking import check_int
from minillm.parallel.collectives import HOST
from minillm.parallel.layers import TensorParallelGroup
from minillm.parallel.processes import cores_of, end_processes, start_without_main
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


def _join_all(procs, conns, timeout_s: float = 300.0) -> list:
    try:
        for c in conns:
            if not c.poll(timeout_s):
                raise TimeoutError(f"the timing processes did not answer within {timeout_s} s")
        return [c.recv() for c in conns]
    finally:
        end_processes(procs, conns, grace_s=10.0)


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
