"""parallel/workers.py — the process side of tensor parallelism: rank 0 is the engine, ranks
1..N-1 are workers.

    workers = TensorParallelWorkers(path, 2)          # spawns rank 1, loads rank 0's shard here
    runner = workers.runner(PagedKVCache.for_model(workers.model, num_blocks, block_size))
    logits = runner.forward(batch)                    # every rank runs the same forward on its
    shard workers.close()

The engine (rank 0) schedules; for each step it sends the step's `BatchInput` to every worker
over a pipe (vLLM broadcasts it through a shared-memory queue), then all ranks run
`ModelRunner.forward` on their shards, meeting in the all-reduces inside the model; rank 0 alone
gets the gathered logits and samples. The collectives run on torch.distributed: gloo between CPU
processes, NCCL between GPUs.

Nothing may hang or outlive the engine: collectives time out (init_process_group's
`timeout`). On gloo a worker that dies or hangs makes the step raise `TensorParallelError`
naming the rank, after which every worker is stopped; NCCL instead aborts a timed-out
collective and crashes the process, as torch's init_process_group documents. Workers are
daemon processes that also exit when their parent disappears; `close()` (also at interpreter
exit) stops them. The rendezvous port is picked free by the OS.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from minillm.checking import check_float, check_int
from minillm.model import Transformer
from minillm.paged import PagedKVCache
from minillm.parallel.layers import TensorParallelGroup, weight_bytes
from minillm.parallel.processes import end_processes, run_queue_s, start_without_main
from minillm.runner import BatchInput, ModelRunner

TIMEOUT_ENV = "MINILLM_TP_TIMEOUT_S"  # seconds a collective may wait for the other ranks
DEFAULT_TIMEOUT_S = 60.0
STARTUP_TIMEOUT_S = 300.0  # spawning a process and importing torch is slow on a loaded machine
HOST = "127.0.0.1"


class TensorParallelError(RuntimeError):
    """A worker died, hung or failed; the group is gone and the engine cannot step any more."""

    stop_s = 0.0  # seconds `fail` spent stopping the group before this error was raised


@dataclass
class RankTimes:
    """A worker's last forward, as it clocked it. perf_counter reads a clock that every process
    of the machine shares (CLOCK_MONOTONIC on Linux), so the hand-over can be timed across
    processes. The times are the host's: on a GPU, kernels and NCCL calls return before the
    device has finished them, so only a CPU group's forward is timed in full."""

    handover_s: float  # from rank 0 sending the batch to this rank starting: pickle, pipe
    forward_s: float  # this rank's forward, its own preparation of the batch included
    calls: list[tuple[float, float]]  # (entered, left) of each collective, in order
    queued: list[float] = field(default_factory=list)  # main thread's run-queue s in each call
    queued_s: float = 0.0  # run-queue seconds of all this rank's threads over forward_s

    @property
    def collectives_s(self) -> float:
        """The part of forward_s inside all-reduces and the gather."""
        return sum(left - entered for entered, left in self.calls)


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def collective_timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    return (
        DEFAULT_TIMEOUT_S
        if text is None
        else check_float(TIMEOUT_ENV, float(text), min=0, min_inclusive=False)
    )


# ---- a worker (ranks 1..N-1), in its own process
#   ---------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """Exit if the engine's process goes away, even if it was killed and could not stop us."""
    if hasattr(os, "sched_getaffinity"):  # Linux: the kernel sends SIGKILL when the parent dies
        try:
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch():
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the watch began
        os._exit(1)


def _worker_main(
    rank, size, path, dtype_name, device_type, port, timeout_s, conn, parent_pid
) -> None:
    _die_with_parent(parent_pid)
    torch.set_num_threads(
        max(1, (os.cpu_count() or 1) // size)
    )  # the ranks share the machine's cores
    try:
        device = torch.device("cpu")
        if device_type == "cuda":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        model = Transformer.from_pretrained(
            path,
            dtype=getattr(torch, dtype_name),
            device=device,
            tp=TensorParallelGroup(rank, size),
        )
        conn.send(("loaded", weight_bytes(model)))
        store = dist.TCPStore(
            HOST, port, size, is_master=False, timeout=timedelta(seconds=STARTUP_TIMEOUT_S)
        )
        dist.init_process_group(
            backend_for(device),
            store=store,
            rank=rank,
            world_size=size,
            timeout=timedelta(seconds=timeout_s),
        )
        runner, last = None, None
        model.tp.stats.record_calls = True  # bounded: reset at every forward
        while True:
            while not conn.poll(
                0.5
            ):  # idle between steps: no collective is waiting, so no timeout applies
                if os.getppid() != parent_pid:
                    os._exit(1)
            message = conn.recv()
            if message[0] == "cache":  # this rank's share of the paged KV cache
                kv = PagedKVCache.for_model(model, message[1], message[2])
                runner = ModelRunner(model, kv)
                conn.send(("cache", sum(t.numel() * t.element_size() for t in kv.k + kv.v)))
            elif message[0] == "forward":
                started, queued = time.perf_counter(), run_queue_s(all_threads=True)
                model.tp.stats.reset()  # so that `calls` holds this forward's only
                runner.forward(message[1])  # the logits go to rank 0 inside the model's gather
                stats = model.tp.stats
                last = RankTimes(
                    started - message[2], time.perf_counter() - started, stats.calls,
                    stats.queued, run_queue_s(all_threads=True) - queued,
                )  # fmt: skip
            elif message[0] == "times":
                conn.send(("times", last))
            elif message[0] == "stop":
                break
        dist.destroy_process_group()
    except (
        BaseException
    ) as e:  # tell the engine why, then go: the engine names this rank in its error
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except (OSError, ValueError):
            pass
        os._exit(1)


# ---- rank 0: the engine's side
#   ---------------------------------------------------------------------


def _shutdown(procs: list, conns: list, owns_group: list) -> None:
    """Stop every worker (politely, then by force) and leave the process group; safe to call
    twice."""
    for conn, p in zip(conns, procs):
        if p.is_alive():
            try:
                conn.send(("stop",))
            except (OSError, ValueError):
                pass
    end_processes(procs, conns, grace_s=3.0)
    if owns_group and owns_group[0] and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except (
            Exception
        ):  # a group broken by a dead peer may refuse; the process is leaving it anyway
            pass
    owns_group[:] = [False]


class TensorParallelWorkers:
    """The N-1 worker processes of a tensor-parallel group and rank 0's shard of the model
    (`model`)."""

    def __init__(
        self,
        path,
        tensor_parallel_size: int,
        dtype: torch.dtype = torch.float32,
        device="cpu",
        timeout_s: float | None = None,
    ):
        size = check_int("tensor_parallel_size", tensor_parallel_size, min=2)
        self.timeout_s = (
            collective_timeout_s()
            if timeout_s is None
            else check_float("timeout_s", timeout_s, min=0, min_inclusive=False)
        )
        device = torch.device(device)
        if device.type == "cuda":
            if torch.cuda.device_count() < size:
                raise ValueError(
                    f"tensor_parallel_size {size} needs {size} GPUs, but torch sees "
                    f"{torch.cuda.device_count()}"
                )
            device = torch.device("cuda", 0)
        if dist.is_initialized():
            raise RuntimeError(
                "this process already belongs to a torch.distributed group (another "
                "tensor-parallel engine?): close it first"
            )
        self.size, self.device, self.path = size, device, path
        # rank 0's shard first: a bad folder or a size that does not divide the heads fails
        # before any process starts
        self.model = Transformer.from_pretrained(
            path, dtype=dtype, device=device, tp=TensorParallelGroup(0, size)
        )
        self.weight_bytes = [weight_bytes(self.model)]
        self.procs: list = []
        self.conns: list = []
        self._owns_group = [False]
        self._closed = False
        self._finalizer = weakref.finalize(
            self, _shutdown, self.procs, self.conns, self._owns_group
        )  # also at exit
        store = dist.TCPStore(
            HOST,
            0,
            size,
            is_master=True,
            timeout=timedelta(seconds=STARTUP_TIMEOUT_S),
            wait_for_workers=False,
        )  # port 0: the OS picks a free one
        ctx = mp.get_context("spawn")  # a fresh interpreter: no forked threads or CUDA state
        try:
            for rank in range(1, size):
                mine, theirs = ctx.Pipe()
                p = ctx.Process(
                    target=_worker_main,
                    name=f"minillm-tp-rank{rank}",
                    daemon=True,
                    args=(
                        rank,
                        size,
                        str(path),
                        str(dtype).removeprefix("torch."),
                        device.type,
                        store.port,
                        self.timeout_s,
                        theirs,
                        os.getpid(),
                    ),
                )
                start_without_main(p)
                theirs.close()
                self.procs.append(p)
                self.conns.append(mine)
            self.weight_bytes += [
                self._expect(rank, "loaded", STARTUP_TIMEOUT_S) for rank in range(1, size)
            ]
            dist.init_process_group(
                backend_for(device),
                store=store,
                rank=0,
                world_size=size,
                timeout=timedelta(seconds=self.timeout_s),
            )
            self._owns_group[0] = True
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _expect(self, rank: int, kind: str, timeout_s: float):
        """The next message of worker `rank`, which must be `kind`; a dead, failing or silent
        worker raises."""
        conn, p = self.conns[rank - 1], self.procs[rank - 1]
        deadline = time.monotonic() + timeout_s
        while not conn.poll(0.05):
            if not p.is_alive():
                raise self.fail(f"while waiting for '{kind}'")
            if time.monotonic() > deadline:
                raise self.fail(f"no '{kind}' from rank {rank} within {timeout_s:g} s")
        try:
            message = conn.recv()
        except (EOFError, OSError):
            raise self.fail(f"while waiting for '{kind}'") from None
        if message[0] == "error":
            raise self.fail(f"rank {rank} failed: {message[1]}")
        if message[0] != kind:
            raise self.fail(f"rank {rank} answered {message[0]!r}, expected {kind!r}")
        return message[1]

    def describe(self) -> str:
        """Each worker's state, for an error message, with the error a worker reported before it
        exited."""
        parts = []
        for rank, (p, conn) in enumerate(zip(self.procs, self.conns), start=1):
            said = ""
            try:
                while conn.poll(0):
                    message = conn.recv()
                    if message[0] == "error":
                        said = f" after reporting {message[1]}"
            except (EOFError, OSError):
                pass
            if p.is_alive():
                parts.append(
                    f"rank {rank} (pid {p.pid}) is alive but did not answer within the "
                    "collective "
                    f"timeout of {self.timeout_s:g} s (hung?)"
                )
            else:
                parts.append(f"rank {rank} (pid {p.pid}) exited with code {p.exitcode}{said}")
        return "; ".join(parts)

    def fail(self, what: str) -> TensorParallelError:
        """Stop the whole group and return the error to raise, naming every worker's state.

        Waits at most 0.5 s in all for workers to exit (one just killed needs a moment to be
        reaped, so its exit code is known), then kills the rest at once: the group is broken,
        and a hung or stopped worker would never answer a polite stop."""
        start = time.monotonic()
        for p in self.procs:
            p.join(max(0.0, start + 0.5 - time.monotonic()))
        error = TensorParallelError(
            f"tensor-parallel group of {self.size} failed ({what}): {self.describe()}; "
            "every worker has been stopped, create a new engine"
        )
        for p in self.procs:
            if p.is_alive():
                p.kill()
        self.close()
        error.stop_s = time.monotonic() - start
        return error

    def check_alive(self, when: str) -> None:
        if self._closed:
            raise TensorParallelError(
                "the tensor-parallel workers were stopped (close() or an earlier failure): "
                "create a new engine"
            )
        if not all(p.is_alive() for p in self.procs):
            raise self.fail(when)

    def send_all(self, message: tuple) -> None:
        try:
            for conn in self.conns:
                conn.send(message)
        except (OSError, ValueError):  # a broken pipe: that worker is gone
            raise self.fail(f"sending {message[0]!r}") from None

    def times(self) -> list[RankTimes]:
        """Each worker's clock of its last forward (rank 1 first); None before any forward."""
        self.send_all(("times",))
        return [self._expect(rank, "times", self.timeout_s) for rank in range(1, self.size)]

    def runner(self, kv: PagedKVCache) -> TensorParallelRunner:
        return TensorParallelRunner(self, kv)

    def close(self) -> None:
        """Stop every worker and leave the process group; idempotent."""
        self._closed = True
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TensorParallelRunner:
    """ModelRunner's interface for a tensor-parallel group: rank 0's forward, mirrored by every
    worker."""

    def __init__(self, workers: TensorParallelWorkers, kv: PagedKVCache):
        self.workers, self.kv = workers, kv
        self.local = ModelRunner(workers.model, kv)
        self.send_s = 0.0  # the last step's preparation and hand-over on rank 0
        self.model, self.device = self.local.model, self.local.device
        workers.send_all(("cache", kv.num_blocks, kv.block_size))
        own = sum(t.numel() * t.element_size() for t in kv.k + kv.v)
        self.kv_bytes = [own] + [
            workers._expect(rank, "cache", STARTUP_TIMEOUT_S) for rank in range(1, workers.size)
        ]

    def forward(self, batch: BatchInput) -> torch.Tensor:
        """Logits [M, vocab] on rank 0; a bad batch raises before any worker sees it."""
        self.workers.check_alive("before a step")
        start = time.perf_counter()
        self.local.prepare(batch)
        self.workers.send_all(("forward", batch, time.perf_counter()))
        self.send_s = time.perf_counter() - start  # rank 0's part of the hand-over
        try:
            return self.local.forward(batch)
        except RuntimeError as e:  # gloo: a peer closed the connection, or the timeout ran out
            raise self.workers.fail(
                f"a collective failed during a step: {str(e).splitlines()[0][:200]}"
            ) from None
