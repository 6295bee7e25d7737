"""parallel/processes.py — starting and ending the helper processes every parallel module runs.

    start_without_main(p)                  # spawn p without re-running the caller's script
    end_processes(procs, conns, grace_s)   # wait, then kill the stragglers; close the pipes
    run_queue_s(all_threads)               # seconds this thread (or process) waited for a core
    pin_threads(pid, cores_of(rank, size)) # every thread of a process on its rank's own cores

Asking the processes to stop is each protocol's own business (a `None`, a `("stop",)`, an
answer it waits for); what follows the asking is the same everywhere, and lives here.
"""

from __future__ import annotations

import os
import sys
import time
import types


def start_without_main(p) -> None:
    """Start a spawned process without re-running the caller's script in it: spawn imports
    `__main__` in the child, which would run an unguarded script (or a notebook's kernel module)
    a second time. The targets live in minillm's modules, so the child needs nothing from
    `__main__`."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        p.start()
    finally:
        sys.modules["__main__"] = main


def end_processes(procs: list, conns: list, grace_s: float) -> None:
    """Give the processes `grace_s` seconds in all to exit, kill those still running (SIGKILL
    also ends a stopped or hung process), close the pipes, and empty both lists; safe to call
    twice."""
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)  # a process just killed needs a moment to be reaped
    for conn in conns:
        conn.close()
    procs.clear()
    conns.clear()


def run_queue_s(all_threads: bool = False) -> float:
    """Seconds this thread, or with `all_threads` every thread of this process, has so far been
    ready to run but waiting for a core: the second field of Linux's schedstat. 0.0 where the
    kernel does not keep it, so a difference of two readings is then 0.0 too."""
    paths = ["/proc/thread-self/schedstat"]
    if all_threads:
        try:
            paths = [
                f"/proc/self/task/{tid}/schedstat" for tid in os.listdir("/proc/self/task")
            ]
        except FileNotFoundError:  # no /proc: not Linux
            return 0.0
    total = 0
    for path in paths:
        try:
            with open(path, "rb") as f:
                total += int(f.read().split()[1])  # run time, run-queue wait, slices (ns)
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass  # a thread that ended between the listing and the read waits no more
    return total / 1e9


def cores_of(rank: int, size: int) -> set[int]:
    """The cores rank `rank` of `size` runs on when each rank gets its own: this machine's
    cores (those this process may use) dealt out in equal runs, at least one each."""
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // size)
    start = (rank * per) % len(cores)
    return set(cores[start : start + per])


def pin_threads(pid: int, cores: set[int]) -> None:
    """Run every thread of process `pid` on `cores` only. `os.sched_setaffinity` sets one
    thread (the pid names the main one), so each thread in /proc/<pid>/task is set; a thread
    the process starts later inherits the mask of the thread that starts it. Linux only."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:  # the thread ended between the listing and the call
            pass
