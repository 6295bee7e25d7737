"""learners.py — the reader's processes, seen from the grader: the zygote that forks them, and
one of them.

`Zygote` is forked off the grader once torch is imported (sandbox.py's forking server); for
every file to grade it forks a `RemoteLearner`: a process that imported the file and answers
requests on a socket. The grader reads its stderr (where faulthandler prints a stack on
request), waits for its import with a deadline, and kills it when a test runs out of time or it
misbehaves.
"""

from __future__ import annotations

import importlib
import importlib.util
import linecache
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import wire
from oskit import recv_line, send_line
from protocol import MAX_STDOUT, STACK_WAIT
from remote import GraderEndpoint, LearnerDied, LoadFailed, TimeLimitExceeded, set_deadline

ASK_EVERY = 0.25  # seconds between two "where are you?" signals to a looping process
STDERR_KEPT = 20000  # chars of the learner's stderr kept for stacks and crash messages


class Zygote:
    """sandbox.py's forking server, forked off the grader after torch was imported: no second
    import."""

    def __init__(self, preload: list[str], forget: bytearray | None = None):
        for module in preload:
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)
        self.ctl, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        grader = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.ctl.close()
                if forget is not None:
                    forget[:] = bytes(len(forget))  # the results key stays in the grader only
                for key in [k for k in os.environ if k.startswith("PRACTICE_")]:
                    del os.environ[key]
                import sandbox

                sandbox.zygote(child.fileno(), grader)
            finally:
                os._exit(0)
        child.close()
        self.ctl.settimeout(120)
        hello = recv_line(self.ctl)[0] or {}
        self.mode, self.why = hello.get("sandbox", "none"), hello.get("why")
        self.ctl.settimeout(30)

    def spawn(self, path: str, name: str, fds: list[int]) -> int:
        send_line(self.ctl, {"path": path, "name": name}, fds)
        reply = recv_line(self.ctl)[0]
        if not reply or "pid" not in reply:
            raise LearnerDied("the sandbox could not start a process for your file")
        return int(reply["pid"])

    def close(self) -> None:
        self.ctl.close()  # the zygote kills what it started and exits
        end = time.monotonic() + 3
        try:
            while time.monotonic() < end:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
                time.sleep(0.01)
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # already reaped
            pass


class RemoteLearner:
    """One process that imported the reader's file; `module` is its proxy."""

    def __init__(self, zygote: Zygote, path: Path, name: str):
        self.path, self.mutable, self.printed = (
            str(path),
            {},
            "",
        )  # mutable: argument name -> position
        self.paths = {self.path}  # every file imported in this process
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_read, err_write = os.pipe()
        try:
            self.pid = zygote.spawn(self.path, name, [theirs.fileno(), err_write])
        finally:
            theirs.close()
            os.close(err_write)
        self.ep = GraderEndpoint(mine, self)
        self.stderr, self._received, self._lock = (
            "",
            0,
            threading.Lock(),
        )  # the tail of its stderr; chars ever read
        self._reader = threading.Thread(target=self._drain, args=(err_read,), daemon=True)
        self._reader.start()
        self.alive, self.module = True, None

    def _drain(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            for chunk in iter(lambda: f.read1(65536), b""):
                text = chunk.decode(errors="replace")
                with self._lock:
                    self.stderr, self._received = (
                        (self.stderr + text)[-STDERR_KEPT:],
                        self._received + len(text),
                    )

    def _stderr_since(self, mark: int) -> str:
        """What the process wrote to stderr after `mark` chars had been read (as much of it as
        is kept)."""
        with self._lock:
            return self.stderr[max(0, len(self.stderr) - (self._received - mark)) :]

    def load(self, seconds: float):
        """Wait for the import of the reader's file; its module proxy, or LoadFailed
        saying why."""
        set_deadline(seconds)
        try:
            header, bufs = self.ep.recv()
        except wire.Deadline:
            frames = self.where()
            self.stop()
            raise LoadFailed(
                {
                    "kind": "timeout",
                    "message": f"importing the file did not finish within {seconds:g} s",
                    **(frames[-1] if frames else {}),
                }
            ) from None
        except (wire.PeerGone, OSError):
            self.stop()
            raise LoadFailed(
                {
                    "kind": "exception",
                    "message": "the process importing the file ended: did it call "
                    "os._exit() or crash?" + self._crash_text(),
                }
            ) from None
        finally:
            set_deadline(None)
        self.printed = str(header.get("out", ""))[-MAX_STDOUT:]
        if "load_error" in header:
            self.stop()
            raise LoadFailed(
                header["load_error"] if isinstance(header["load_error"], dict) else {}
            )
        self.module = self.ep.dec(header.get("loaded"), bufs)
        return self.module

    def load_another(self, path: Path, name: str, seconds: float):
        """Import one more file of the same exercise in this process (`check`: no fork per wrong
        answer)."""
        self.paths.add(str(path))
        set_deadline(seconds)
        try:
            module = self.ep.request("load", path=str(path), name=name)
        finally:
            set_deadline(None)
        if isinstance(module, dict) and "load_error" in module:
            raise LoadFailed(
                module["load_error"] if isinstance(module["load_error"], dict) else {}
            )
        return module

    def where(self) -> list[dict]:
        """Ask the running process where it is (faulthandler prints its stacks); the innermost
        frame of the
        reader's file. Asked again every ASK_EVERY s: a process that had not yet reached the
        reader's code (a slow first call on a loaded machine) gets there, and a stack printed
        by a thread that was not running it says nothing."""
        end = time.monotonic() + STACK_WAIT
        while time.monotonic() < end:
            with self._lock:
                mark = self._received
            try:
                os.kill(self.pid, signal.SIGUSR1)
            except OSError:
                return []
            again = min(end, time.monotonic() + ASK_EVERY)
            while time.monotonic() < again:
                time.sleep(0.02)
                frames = self._reader_frames(self._stderr_since(mark))
                if frames:
                    return frames[:1]
        return []

    def _reader_frames(self, dump: str) -> list[dict]:
        """Frames of the reader's files in faulthandler's dump, innermost first; the signalled
        thread's first."""
        threads = re.split(r"^(?=(?:Current thread|Thread) 0x)", dump, flags=re.M)
        threads.sort(key=lambda block: not block.startswith("Current thread"))
        return [
            {
                "file": file,
                "line": int(line),
                "code": linecache.getline(file, int(line)).strip(),
            }
            for block in threads
            for file, line in re.findall(r'File "(.+?)", line (\d+)', block)
            if os.path.abspath(file) in self.paths
        ]

    def timed_out(self) -> TimeLimitExceeded:
        frames = self.where()
        self.stop()
        return TimeLimitExceeded("the time limit ran out", frames)

    def died(self) -> LearnerDied:
        self.stop()
        return LearnerDied(
            "your code's process ended during this test: did it call os._exit() or exit from a "
            "thread, or crash?" + self._crash_text()
        )

    def _crash_text(self) -> str:
        time.sleep(0.05)
        fatal = [
            line for line in self.stderr.splitlines() if line.startswith("Fatal Python error")
        ]
        return f" ({fatal[-1]})" if fatal else ""

    def stop(self) -> None:
        if not self.alive:
            return
        self.alive = False
        try:
            os.killpg(
                self.pid, signal.SIGKILL
            )  # the process, and its children unless they left the group
        except OSError:
            pass
        self.ep.sock.close()
