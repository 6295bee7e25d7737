"""sandbox.py — the zygote and the reader's process (the learner): the only place the reader's
code runs.

The grader forks the zygote off itself once torch and minillm are imported (nothing of the
reader's has run there), and the zygote forks, for every file to grade, a process that

1. dies with the zygote, starts its own session, and (where the OS allows) enters new user,
   mount and PID namespaces with a read-only file system and no capabilities
   (oskit.enter_sandbox);
2. imports the reader's file;
3. answers the grader's requests on its socket: calls, attribute reads, method calls (rpc.py),
   with each call's printing captured and its arguments checked for in-place changes.
"""

from __future__ import annotations

import faulthandler
import hashlib
import importlib.util
import inspect
import io
import linecache
import os
import random
import re
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

import oskit  # noqa: E402
import rpc  # noqa: E402
import wire  # noqa: E402
from protocol import MAX_STDOUT, SANDBOX_ENV  # noqa: E402


class Capture(io.TextIOBase):
    """sys.stdout while a call runs: keeps the last MAX_STDOUT characters the reader's code
    printed."""

    def __init__(self):
        self.text = ""

    def writable(self):
        return True

    def write(self, s):
        self.text = (self.text + str(s))[-MAX_STDOUT:]
        return len(s)


class LearnerEndpoint(rpc.Endpoint):
    """The reader's side: serves the grader's requests on the reader's objects."""

    def __init__(self, sock, path: str):
        super().__init__(sock, "L")
        self.paths = {
            path
        }  # the reader's files loaded here (`check` loads a folder's files one after another)
        self.capture: Capture | None = None
        # request id -> (argument names, names allowed to change, digests before)
        self._calls: dict = {}

    def serve(self, header, bufs):
        if self.capture is not None:  # a nested request: its printing belongs to the outer call
            return super().serve(header, bufs)
        self.capture = Capture()
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.capture
        try:
            super().serve(header, bufs)
        finally:
            sys.stdout, sys.stderr = saved
            self.capture = None

    def send(self, header, bufs):
        if self.capture is not None and self.capture.text and "re" in header:
            header["out"], self.capture.text = self.capture.text, ""
        super().send(header, bufs)

    def dispatch(self, header, bufs):
        if header.get("op") == "load":  # another file of the same exercise, in this process
            path, name = str(header.get("path")), str(header.get("name"))
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise wire.ProtocolError("bad module name")
            self.paths.add(path)
            try:
                return load(path, name)
            except BaseException as e:  # noqa: BLE001 — described, as at start-up
                return {"load_error": describe_load_error(e, self.paths)}
        if header.get("op") == "launch":
            return self.launch(header, bufs)
        if header.get("op") != "identity":
            return super().dispatch(header, bufs)
        value = self.exports.get(header.get("ref"))
        for step in header.get("path") or []:
            value = value[step] if isinstance(step, int) else getattr(value, str(step))
        pointer = (
            value.untyped_storage().data_ptr() if hasattr(value, "untyped_storage") else None
        )
        cls = value if isinstance(value, type) else type(value)
        return [id(value), pointer, cls.__module__, cls.__qualname__, global_random_state()]

    def launch(self, header, bufs):
        """kernel[grid](*args, **kwargs) on the grader's buffers, sent back as it left them."""
        if header.get("ref") not in self.exports:
            raise wire.ProtocolError("a launch of an object that was never shared")
        grid = header.get("grid")
        if (
            not isinstance(grid, list)
            or not 1 <= len(grid) <= 3
            or any(type(g) is not int or g < 0 for g in grid)
        ):
            raise wire.ProtocolError("a launch without a grid of 1 to 3 sizes")
        args = [self.dec(a, bufs) for a in self._list(header.get("args", []))]
        raw_kwargs = header.get("kwargs", {})
        if not isinstance(raw_kwargs, dict):
            raise wire.ProtocolError("keyword arguments that are not a mapping")
        kwargs = {str(k): self.dec(v, bufs) for k, v in raw_kwargs.items()}
        self.exports[header["ref"]][tuple(grid)](*args, **kwargs)
        return args

    def invoke(self, fn, args, kwargs, header):
        """Call fn, remembering its arguments' contents to report any it changes in place."""
        names = _argument_names(fn, args, kwargs)
        mutable = set(header.get("mutable") or ())
        watched = {
            key: rpc.fingerprint(self, value)
            for key, (name, value) in names.items()
            if name not in mutable and _mutable_value(value)
        }
        self._calls[header.get("req")] = (names, mutable, watched)
        return fn(*args, **kwargs)

    def reply_extra(self, header, bufs):
        """The arguments changed in place (a mistake) and the new contents of those allowed to
        change."""
        call = self._calls.pop(header.get("req"), None)
        if call is None:
            return {}
        names, mutable, watched = call
        changed = [
            names[key][0]
            for key, digest in watched.items()
            if rpc.fingerprint(self, names[key][1]) != digest
        ]
        back = {
            key: self.enc(value, bufs)
            for key, (name, value) in names.items()
            if name in mutable or type(value).__name__ == "Generator"
        }
        return {"mutated": changed, "back": back}

    def describe_error(self, e):
        info = super().describe_error(e)
        info["frames"] = learner_frames(e, self.paths)
        if isinstance(e, AttributeError) and isinstance(getattr(e, "obj", None), type(sys)):
            info["missing"] = getattr(e, "name", None)
        return info


def global_random_state() -> str:
    """A digest of this process's global random state (torch's default generator, `random`)."""
    h = hashlib.sha256(repr(random.getstate()).encode())
    torch = sys.modules.get("torch")
    if torch is not None:
        h.update(torch.random.get_rng_state().numpy().tobytes())
    return h.hexdigest()


def _argument_names(fn, args, kwargs) -> dict:
    """key ("0", "1", ... or the keyword) -> (parameter name, value)."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    out = {
        str(i): (params[i] if i < len(params) else f"argument {i + 1}", v)
        for i, v in enumerate(args)
    }
    out.update({k: (k, v) for k, v in kwargs.items()})
    return out


def _mutable_value(value) -> bool:
    if isinstance(value, (list, dict, set, bytearray)):
        return True
    return (
        type(value).__name__ in ("Tensor", "Parameter")
        or isinstance(value, tuple)
        and any(map(_mutable_value, value))
    )


def learner_frames(e: BaseException, paths: set[str]) -> list[dict]:
    """The lines of the reader's files in the traceback, innermost last, with the function's
    qualified name."""
    frames = []
    for frame, line in traceback.walk_tb(e.__traceback__):
        code = frame.f_code
        if os.path.abspath(code.co_filename) in paths:
            frames.append(
                {
                    "file": code.co_filename,
                    "line": line,
                    "function": getattr(code, "co_qualname", code.co_name),
                    "code": linecache.getline(code.co_filename, line).strip(),
                }
            )
    return frames


def describe_load_error(e: BaseException, paths: set[str]) -> dict:
    if isinstance(e, SyntaxError):
        return {
            "kind": "syntax",
            "message": f"{type(e).__name__}: {e.msg}",
            "file": e.filename,
            "line": e.lineno,
            "code": (e.text or "").rstrip("\n"),
            "column": e.offset,
        }
    frames = learner_frames(e, paths)
    where = frames[-1] if frames else {}
    kind = "import" if isinstance(e, ImportError) else "exception"
    return {"kind": kind, "message": f"{type(e).__name__}: {e}", **where}


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def run_learner(sock_fd: int, err_fd: int, path: str, name: str) -> None:
    """In the learner process: import the reader's file, then answer requests until the grader
    hangs up."""
    os.dup2(err_fd, 2)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.closerange(3, sock_fd)  # nothing of the zygote's or the grader's stays open here
    os.closerange(sock_fd + 1, 1 << 16)
    sys.stdin, sys.stdout = io.StringIO(), io.StringIO()
    sys.stderr = os.fdopen(2, "w", buffering=1)
    faulthandler.enable(file=sys.stderr)  # a crash prints where it happened
    faulthandler.register(
        signal.SIGUSR1, file=sys.stderr, all_threads=True
    )  # the grader's "where are you?"
    # (every thread's stack: the signal may land on a thread other than the one running the
    # reader's code)
    sys.dont_write_bytecode = True
    sock = socket.socket(fileno=sock_fd)
    ep = LearnerEndpoint(sock, path)
    bufs: list = []
    try:
        capture = Capture()
        sys.stdout = capture
        module = load(path, name)
        sys.stdout = io.StringIO()
        ep.send({"loaded": ep.enc(module, bufs), "out": capture.text}, bufs)
    except BaseException as e:  # noqa: BLE001 — whatever the file does, the grader gets a description
        ep.send({"load_error": describe_load_error(e, ep.paths)}, [])
        os._exit(0)
    try:
        while True:
            header, bufs = ep.recv()
            ep.serve(header, bufs)
    except (wire.PeerGone, wire.ProtocolError, OSError):
        pass
    os._exit(0)


# ---------------------------------------------------------------- the zygote


def spawn(ctl: socket.socket, request: dict, fds: list[int], sandboxed: bool) -> int:
    """Fork the process for one file: a session leader that waits for the learner (PID 1 when
    sandboxed)."""
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:  # the middle process: trusted code only
        ctl.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        oskit.die_with_parent(signal.SIGKILL, zygote)
        if sandboxed:
            oskit.unshare_namespaces()
        middle = os.getpid()
        learner = os.fork()
        if learner == 0:
            oskit.die_with_parent(signal.SIGKILL, middle if not sandboxed else 0)
            if sandboxed:
                oskit.lock_down()
                os.environ["TMPDIR"] = oskit.SCRATCH
                tempfile.tempdir = None
                os.chdir(oskit.SCRATCH if os.path.isdir(oskit.SCRATCH) else "/")
            run_learner(fds[0], fds[1], request["path"], request["name"])
        for fd in fds:
            os.close(fd)
        signal.signal(
            signal.SIGUSR1, lambda *_: os.kill(learner, signal.SIGUSR1)
        )  # pass on "where are you?"
        while True:
            try:
                _, status = os.waitpid(learner, 0)
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
            except ChildProcessError:
                os._exit(0)
    except BaseException as e:  # noqa: BLE001 — said on the learner's stderr, which the grader reads
        os.write(fds[1], f"Fatal Python error: the sandbox could not start: {e}\n".encode())
        os._exit(70)


def probe_namespaces() -> str | None:
    """Why the namespace sandbox cannot be used here, or None when a trial child could lock
    itself down."""
    if not oskit.LINUX or os.environ.get(SANDBOX_ENV, "auto") == "process":
        return "disabled" if oskit.LINUX else f"not available on {sys.platform}"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            oskit.unshare_namespaces()
            inner = os.fork()
            if inner == 0:
                oskit.lock_down()
                os._exit(0)
            _, status = os.waitpid(inner, 0)
            os.write(
                w, b"ok" if os.waitstatus_to_exitcode(status) == 0 else b"lock_down failed"
            )
        except BaseException as e:  # noqa: BLE001
            os.write(w, str(e).encode()[:500])
        os._exit(0)
    os.close(w)
    answer = os.read(r, 600).decode(errors="replace")
    os.close(r)
    os.waitpid(pid, 0)
    return None if answer == "ok" else answer or "the trial child died"


def zygote(ctl_fd: int, grader: int) -> None:
    """The forking server; the grader forks it off itself (remote.Zygote), with torch already
    imported."""
    oskit.die_with_parent(signal.SIGKILL, grader)
    oskit.not_dumpable()
    oskit.become_subreaper()  # a learner's escaped children come back to us, and die with us
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the grader's terminal and pytest's capture files are not ours either
        os.dup2(null, fd)
    os.closerange(3, ctl_fd)  # the grader's pipes and files are not ours to hold
    os.closerange(ctl_fd + 1, 1 << 16)
    ctl = socket.socket(fileno=ctl_fd)
    why_not = probe_namespaces()
    oskit.send_line(ctl, {"sandbox": "process" if why_not else "namespaces", "why": why_not})
    signal.signal(signal.SIGCHLD, lambda *_: oskit.reap())
    while True:
        try:
            request, fds = oskit.recv_line(ctl)
        except InterruptedError:
            continue
        if request is None:
            break
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", request.get("name", "")):
            raise SystemExit("bad module name")
        pid = spawn(ctl, request, fds, sandboxed=why_not is None)
        for fd in fds:
            os.close(fd)
        oskit.send_line(ctl, {"pid": pid})
    oskit.kill_descendants()
    os._exit(0)  # nothing to flush; tearing torch down would only cost time
