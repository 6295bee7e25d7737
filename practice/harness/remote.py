"""remote.py — the grader's end of the socket to the reader's process, and what the reader may
touch.

The tests call the reader's code through proxies (`learner.rms_norm(x, w)` is one request; see
learners.py for the processes). Replies bring values, the arguments a call changed in place (a
failure unless the test allows it), what the code printed, and errors rebuilt with the reader's
lines. The reader's code may call back into objects the grader passes (the model, a module):
only into what `share` allows (calling a module, reading its layers and config, the methods
named), never changing them, and every wait is bounded by the test's deadline.
"""

from __future__ import annotations

import sys
import time

import rpc
import wire
from protocol import MAX_STDOUT


class TimeLimitExceeded(BaseException):
    """The reader's code outlived the test's time limit; a BaseException so `except Exception`
    cannot swallow it."""

    def __init__(self, message: str, frames: list[dict]):
        super().__init__(message)
        self.learner = {"frames": frames}


class LearnerDied(Exception):
    """The reader's process ended in the middle of a call."""


class LoadFailed(Exception):
    """The reader's file could not be imported; `info` says how (kind, message, line)."""

    def __init__(self, info: dict):
        super().__init__(info.get("message", "the file could not be imported"))
        self.info = info


class ChangedInput(AssertionError):
    """A call changed one of its arguments in place."""


class InvalidAnswer(AssertionError):
    """The reader's process sent something that is not a value."""


# ---------------------------------------------------------------- what the reader's code may
#   touch

_shared: dict[int, tuple[object, frozenset, bool]] = {}


def share(obj, *, methods=(), call: bool = False):
    """Let the reader's code call `obj` (call=True) and the named methods of it; returns obj."""
    _shared[id(obj)] = (obj, frozenset(methods), call)
    return obj


def identity(proxy, path: list) -> tuple:
    """(id, data pointer) of proxy.<path...> in the reader's process: is it still the same
    object?"""
    return tuple(proxy._ep.request("identity", proxy, path=path))


def launch(proxy, grid, args, kwargs) -> list:
    """proxy[grid](*args, **kwargs) in the reader's process (a Triton kernel); the args
    after."""
    return proxy._ep.request(
        "launch", proxy, args=args, kwargs=kwargs, grid=[int(g) for g in grid]
    )


def _is_module(obj) -> bool:
    nn = sys.modules.get("torch.nn")
    return nn is not None and isinstance(obj, nn.Module)


def _refuse(obj, name: str | None, what: str):
    kind = type(obj).__name__
    raise AttributeError(
        f"the judge's {kind} lets your code {what}; `{name}` is not shared with your code"
        if name
        else f"the judge's {kind} cannot be used that way by your code ({what})"
    )


# ---------------------------------------------------------------- deadlines: one per test

_deadline: list[float | None] = [None]


def set_deadline(seconds: float | None) -> None:
    _deadline[0] = None if seconds is None else time.monotonic() + seconds


class GraderEndpoint(rpc.Endpoint):
    fatal = rpc.Endpoint.fatal + (
        ChangedInput,
        InvalidAnswer,
        LearnerDied,
    )  # the test fails with these directly

    def __init__(self, sock, learner):  # learner: learners.RemoteLearner
        super().__init__(sock, "G")
        self.learner = learner

    def serve(self, header, bufs):
        """A request of the reader's code (a call of the model, ...); a failure of the test
        itself ends the exchange."""
        try:
            super().serve(header, bufs)
        except (ChangedInput, InvalidAnswer, LearnerDied):
            # it waits for a reply that will not come: start afresh for the next test
            self.learner.stop()
            raise

    @property
    def deadline(self):
        return _deadline[0]

    @deadline.setter
    def deadline(self, value):
        pass  # one deadline for every learner: the current test's

    def request(self, op, target=None, name=None, args=(), kwargs=None, **extra):
        if op in ("call", "callmethod"):
            extra["mutable"] = sorted(
                self.learner.mutable
            )  # the names; the reader's process reports changes
        try:
            return super().request(op, target, name, args, kwargs, **extra)
        except wire.Deadline:
            raise self.learner.timed_out() from None
        except (wire.PeerGone, OSError):
            raise self.learner.died() from None
        except wire.ProtocolError as e:
            self.learner.stop()
            raise InvalidAnswer(
                f"your code's process sent something that is not a value ({e})"
            ) from None

    def take_reply(self, request, reply, bufs, args, kwargs):
        self.learner.printed = (self.learner.printed + str(reply.get("out", "")))[-MAX_STDOUT:]
        self._copy_back(reply.get("back"), bufs, args, kwargs)
        if "err" in reply:
            info = reply["err"] if isinstance(reply["err"], dict) else {}
            error = wire.rebuild_exception(info)
            frames = [f for f in info.get("frames") or [] if isinstance(f, dict)]
            error.learner = {
                "frames": frames,
                "call": _call_text(request, self, args, kwargs),
                "missing": info.get("missing"),
            }
            raise error
        value = self.dec(reply.get("ok"), bufs)
        changed = [str(n) for n in reply.get("mutated") or []]
        if changed:
            raise ChangedInput(
                f"{_call_text(request, self, args, kwargs)} changed its argument "
                f"`{changed[0]}` in place: leave the inputs as they "
                "were (work on a copy, or build a new value)"
            )
        return value

    def _copy_back(self, back, bufs, args, kwargs) -> None:
        """Arguments the call may change (a list the scheduler edits, a generator's state) get
        their new contents.

        Which ones is the test's decision (MAY_CHANGE_IN_PLACE: name -> position), never the
        reader's process's: anything else it sends back is ignored, so it cannot rewrite an
        input the test computes its reference from.
        """
        if not isinstance(back, dict):
            return
        torch = sys.modules.get("torch")
        allowed = {str(k) for k in self.learner.mutable} | {
            str(v) for v in self.learner.mutable.values()
        }
        for key, tree in back.items():
            original = (
                args[int(key)] if key.isdigit() and int(key) < len(args) else kwargs.get(key)
            )
            is_generator = torch is not None and isinstance(original, torch.Generator)
            if key not in allowed and not is_generator:
                continue
            new = self.dec(tree, bufs)
            if isinstance(original, list) and isinstance(new, list):
                original[:] = new
            elif isinstance(original, dict) and isinstance(new, dict):
                original.clear()
                original.update(new)
            elif (
                torch is not None
                and isinstance(original, torch.Generator)
                and isinstance(new, torch.Generator)
            ):
                original.set_state(new.get_state())

    # ---------------------------------------------------------- the reader's calls into the
    #   grader
    def allow(self, op, obj, name=None, value=None):
        entry = _shared.get(id(obj))
        methods, callable_ = (
            (entry[1], entry[2]) if entry and entry[0] is obj else (frozenset(), False)
        )
        if isinstance(name, str) and name.startswith("_"):
            _refuse(obj, name, "read its public attributes")
        if op == "setattr":
            _refuse(obj, None, "read it, not change it")
        if op == "call" and not (_is_module(obj) or callable_):
            _refuse(obj, None, "read its attributes, not call it")
        if op in ("method", "callmethod") and not (
            name in methods or _is_module(obj) and name == "forward"
        ):
            _refuse(
                obj,
                name,
                "call "
                + (", ".join(sorted(methods)) if methods else "it")
                + " and read its data",
            )
        if (
            op == "value"
            and callable(value)
            and not _is_module(value)
            and not isinstance(value, type)
        ):
            _refuse(obj, name, "read its data")

    def invoke(self, fn, args, kwargs, header):
        torch = sys.modules.get("torch")
        if getattr(fn, "__name__", None) == "forward" and _is_module(
            getattr(fn, "__self__", None)
        ):
            fn = fn.__self__  # module(...), so the hooks a test counts with see the call
        if torch is None:
            return fn(*args, **kwargs)
        with torch.no_grad():
            return fn(*args, **kwargs)


def _call_text(request: dict, ep: rpc.Endpoint, args, kwargs) -> str:
    """`rms_norm(tensor of shape [2, 5, 64], ...)`: the call as a reader would write it."""
    target = ep.proxies.get(request.get("ref"))
    owner = (target._name or target._cls) if target is not None else "your code"
    op = request.get("op")
    if op not in ("call", "callmethod"):
        return f"{owner}.{request.get('name')}" if request.get("name") else owner
    name = (
        f"{target._cls if target is not None else owner}.{request['name']}"
        if op == "callmethod"
        else owner
    )
    shown = [_brief(a) for a in args] + [f"{k}={_brief(v)}" for k, v in kwargs.items()]
    text = ", ".join(shown)
    return f"{name}({text if len(text) < 160 else text[:157] + '...'})"


def _brief(x) -> str:
    """A value as it reads in a call: small tensors by value, others by shape (and dtype unless
    float32)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and x.numel() > 6:
        dtype = "" if x.dtype == torch.float32 else " " + str(x.dtype).removeprefix("torch.")
        return f"tensor {list(x.shape)}{dtype}"
    if isinstance(x, rpc.Proxy):
        return f"<{x._cls}>"
    if not isinstance(x, (type(None), bool, int, float, str, list, tuple, dict, set)) and not (
        torch is not None and isinstance(x, (torch.Tensor, torch.dtype, torch.Generator))
    ):
        return f"<{type(x).__name__}>"
    return wire.show(x, limit=6)
