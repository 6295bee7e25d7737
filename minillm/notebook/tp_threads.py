"""notebook/tp_threads.py — which threads of a gloo rank hold its core during its all-reduces.

    ranks = threads_during_all_reduces(24_576, calls=13, repeats=10)
    ranks[0].sequence_s                   # rank 0's seconds for each sequence of 13 calls
    ranks[0].threads["main"].run_s        # its main thread's time on a core, per sequence

Chapter 10 times a decode step's 13 gloo all-reduces with no model between them, each rank
pinned to its own core, and finds them far slower than their fastest call. With one core per
rank, whatever keeps a rank's main thread off its core is another thread of the same process.
This module runs the same sequence in two spawned ranks and reads, before and after each
sequence, every thread's name (`/proc/self/task/<tid>/comm`) and its time on a core and in the
run queue (the first two fields of `.../schedstat`), so the thread that holds the core is named.
Linux only.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

import torch

from minillm.parallel.processes import cores_of
from minillm.parallel.timing import _join_all, _join_group, _start_ranks, _store


@dataclass
class ThreadTimes:
    """One name's threads in one rank, per sequence of calls (the mean over the sequences)."""

    count: int  # threads of this name alive through the sequences
    run_s: float  # seconds on a core
    wait_s: float  # seconds ready to run, with no core free (run-queue time)
    slices: float  # times it was put on a core


@dataclass
class RankThreads:
    sequence_s: list[float]  # each sequence of calls, this rank's clock
    threads: dict[str, ThreadTimes] = field(default_factory=dict)  # "main" is the caller's


def _snapshot() -> dict[int, tuple[str, int, int, int]]:
    """tid -> (name, ns on a core, ns in the run queue, slices) for every thread of this
    process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait, slices = (int(v) for v in f.read().split()[:3])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # a thread that ended between the listing and the read
        out[int(tid)] = (name, run, wait, slices)
    return out


def _rank(rank, size, port, nbytes, calls, repeats, conn) -> None:
    import torch.distributed as dist

    os.sched_setaffinity(0, cores_of(rank, size))  # before the group starts its threads
    _join_group(rank, size, port)
    x = torch.ones(max(1, nbytes // 4))  # float32
    sums: dict[int, list] = {}  # tid -> [name, run ns, wait ns, slices] over the sequences
    walls = []
    for i in range(repeats + 1):  # the first sequence sets up connections and buffers
        dist.barrier()
        before, start = _snapshot(), time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(x)
        wall, after = time.perf_counter() - start, _snapshot()
        if not i:
            continue
        walls.append(wall)
        for tid, (name, run, wait, slices) in after.items():
            if tid in before:  # alive through the sequence
                s = sums.setdefault(tid, ["main" if tid == os.getpid() else name, 0, 0, 0])
                s[1] += run - before[tid][1]
                s[2] += wait - before[tid][2]
                s[3] += slices - before[tid][3]
    threads: dict[str, ThreadTimes] = {}
    for name, run, wait, slices in sums.values():  # threads of one name added together
        t = threads.setdefault(name, ThreadTimes(0, 0.0, 0.0, 0.0))
        t.count += 1
        t.run_s += run / 1e9 / repeats
        t.wait_s += wait / 1e9 / repeats
        t.slices += slices / repeats
    conn.send(RankThreads(walls, threads))
    dist.destroy_process_group()
    conn.close()


def threads_during_all_reduces(
    nbytes: int, calls: int, repeats: int = 10, world_size: int = 2
) -> list[RankThreads]:
    """`repeats` sequences of `calls` back-to-back gloo all-reduces of `nbytes` (float32), each
    rank's threads pinned to its own cores (`cores_of`); per rank, each sequence's seconds and
    every thread's time on a core and in the run queue, per sequence."""
    port, store = _store(world_size)
    procs, conns = _start_ranks(
        _rank, [(r, world_size, port, nbytes, calls, repeats) for r in range(world_size)]
    )
    ranks = _join_all(procs, conns)
    del store  # the ranks met at it: kept until they answered
    return ranks


def print_threads(ranks: list[RankThreads], calls: int) -> None:
    """One table: each rank's threads, busiest first, in ms per sequence of `calls`."""
    print(
        f"{'rank':<5}{'thread':<22}{'threads':>8}{'on a core':>11}{'waiting':>10}{'slices':>8}"
    )
    for r, rank in enumerate(ranks):
        mean = statistics.mean(rank.sequence_s) * 1e3  # a mean, so the threads' times compare
        print(f"{r:<5}{f'{calls} calls, the mean sequence':<30}{mean:>8.1f} ms")
        for name, t in sorted(rank.threads.items(), key=lambda kv: -kv[1].run_s):
            print(
                f"{'':<5}{name:<22}{t.count:>8}{t.run_s * 1e3:>8.2f} ms"
                f"{t.wait_s * 1e3:>7.2f} ms{t.slices:>8.0f}"
            )
