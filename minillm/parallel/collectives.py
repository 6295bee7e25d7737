"""parallel/collectives.py — a real all-reduce for code that plays every rank in one process.

    with GlooAllReduce(3) as all_reduce:                 # 3 gloo processes on 127.0.0.1
        sums = all_reduce([a0, a1, a2])                  # each rank's tensor in, each rank's
        sum out all_reduce.calls, all_reduce.bytes               # what went through

A notebook cell or an exercise computes rank r's partial result for every r, then hands the list
to `all_reduce`: tensor r goes to process r, the N processes run `torch.distributed.all_reduce`
over gloo, and each one's result comes back. The code under study never needs a network or a
process group of its own (the book's exercises run it in a sandbox); the communication is the
real one. Processes are daemons, stop with `close()`, at exit, or when their parent disappears.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import weakref
from datetime import timedelta

import torch

from minillm.checking import check_int
from minillm.parallel.processes import end_processes

HOST = "127.0.0.1"


def _rank_main(
    rank: int, size: int, port: int, conn, parent_pid: int, timeout_s: float
) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        store = dist.TCPStore(
            HOST, port, size + 1, is_master=False, timeout=timedelta(seconds=60)
        )
        dist.init_process_group(
            "gloo",
            store=store,
            rank=rank,
            world_size=size,
            timeout=timedelta(seconds=timeout_s),
        )
        conn.send("ready")
        while True:
            while not conn.poll(0.5):
                if os.getppid() != parent_pid:
                    os._exit(1)
            x = conn.recv()
            if x is None:
                break
            dist.all_reduce(x)
            conn.send(x)
        dist.destroy_process_group()
    except BaseException as e:
        try:
            conn.send(f"error: {type(e).__name__}: {e}")
        except (OSError, ValueError):
            pass
        os._exit(1)


def _stop(procs: list, conns: list) -> None:
    for conn in conns:
        try:
            conn.send(None)
        except (OSError, ValueError):
            pass
    end_processes(procs, conns, grace_s=2.0)


class GlooAllReduce:
    """`size` gloo processes that sum, element-wise, the i-th tensor of every call across the
    ranks."""

    def __init__(self, size: int, timeout_s: float = 30.0, start_method: str | None = None):
        self.size = check_int("size", size, min=1)
        self.timeout_s = timeout_s
        self.calls = 0
        self.bytes = 0  # payload per rank, summed over the calls
        self.procs: list = []
        self.conns: list = []
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.conns)
        import torch.distributed as dist

        # the store lives here; it counts this process as one more client, hence size + 1 above
        self.store = dist.TCPStore(
            HOST,
            0,
            self.size + 1,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
        )
        method = start_method or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        ctx = mp.get_context(
            method
        )  # fork: no second import of torch, so a group starts in a blink
        try:
            for rank in range(self.size):
                mine, theirs = ctx.Pipe()
                p = ctx.Process(
                    target=_rank_main,
                    args=(rank, self.size, self.store.port, theirs, os.getpid(), timeout_s),
                    daemon=True,
                    name=f"minillm-gloo-rank{rank}",
                )
                p.start()
                theirs.close()
                self.procs.append(p)
                self.conns.append(mine)
            for rank in range(self.size):
                self._receive(rank, "starting")
        except BaseException:
            self.close()
            raise

    def _receive(self, rank: int, what: str):
        conn, p = self.conns[rank], self.procs[rank]
        deadline = time.monotonic() + max(60.0, self.timeout_s)
        while not conn.poll(0.05):
            if not p.is_alive() or time.monotonic() > deadline:
                self.close()
                state = "exited" if not p.is_alive() else "did not answer"
                raise RuntimeError(f"gloo rank {rank} {state} while {what}")
        message = conn.recv()
        if isinstance(message, str) and message.startswith("error"):
            self.close()
            raise RuntimeError(f"gloo rank {rank} failed while {what}: {message}")
        return message

    def __call__(self, tensors):
        """tensors: one per rank, all of one shape and dtype; returns each rank's sum (new
        tensors)."""
        tensors = list(tensors)
        if len(tensors) != self.size:
            raise ValueError(
                f"all_reduce got {len(tensors)} tensors: expected one per rank, {self.size}"
            )
        shapes = {(tuple(t.shape), t.dtype) for t in tensors if isinstance(t, torch.Tensor)}
        if len(shapes) != 1 or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise ValueError(
                f"all_reduce got tensors of shapes/dtypes {sorted(map(str, shapes))}: "
                "expected one "
                "tensor per rank, all of the same shape and dtype"
            )
        if not self.procs:
            raise RuntimeError("this all-reduce group was closed")
        self.calls += 1
        self.bytes += tensors[0].numel() * tensors[0].element_size()
        for conn, t in zip(self.conns, tensors):
            # a copy: torch's pipe moves a tensor's storage into shared memory, where the rank
            # sums in place, so sending the caller's own tensor would overwrite it with the sum
            conn.send(t.detach().cpu().clone(memory_format=torch.contiguous_format))
        return [self._receive(rank, "summing") for rank in range(self.size)]

    def close(self) -> None:
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
