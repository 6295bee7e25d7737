"""wire.py — values across the socket between the grader and the reader's process: data, never
code.

Values travel as data: numbers, strings, lists, tuples, dicts, sets, tensors (dtype, shape,
bytes), dtypes, torch generators (their state) and minillm's own dataclasses (field by field,
rebuilt without running any code). Anything else stays where it lives and the other side gets a
`Proxy`: a handle whose attribute reads, calls and method calls are requests answered by the
owner (rpc.py). Decoding never imports, never unpickles and never runs code named by the peer,
so a hostile peer can send wrong values but not instructions.
"""

from __future__ import annotations

import builtins
import dataclasses
import sys


class ProtocolError(Exception):
    """The peer sent something that is not a valid message."""


class PeerGone(Exception):
    """The peer's end of the socket closed (its process ended)."""


class Deadline(Exception):
    """Time ran out while waiting for the peer."""


DTYPES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)


def _torch():
    return sys.modules.get("torch")


# ---------------------------------------------------------------- exceptions across the wire

_mirrored: dict[tuple, type] = {}


def exception_class(desc: dict) -> type:
    """A local class for the peer's exception class: the builtin itself, or a same-named
    subclass of it."""
    name, module, mro = str(desc.get("name")), str(desc.get("module")), desc.get("mro") or []
    if (
        module == "builtins"
        and isinstance(getattr(builtins, name, None), type)
        and issubclass(getattr(builtins, name), Exception)
    ):
        return getattr(builtins, name)
    base = next(
        (
            getattr(builtins, n)
            for n in mro
            if isinstance(getattr(builtins, str(n), None), type)
            and issubclass(getattr(builtins, n), Exception)
        ),
        Exception,
    )
    key = (module, str(desc.get("qualname", name)), base)
    if (
        key not in _mirrored
    ):  # SystemExit and friends become plain Exceptions: they must not stop this process
        _mirrored[key] = type(name, (base,), {"__module__": module, "__qualname__": key[1]})
    return _mirrored[key]


def describe_class(cls: type) -> dict:
    return {
        "name": cls.__name__,
        "qualname": cls.__qualname__,
        "module": cls.__module__,
        "mro": [c.__name__ for c in cls.__mro__ if c.__module__ == "builtins"],
    }


def rebuild_exception(info: dict) -> BaseException:
    cls = exception_class(info.get("cls") or {})
    message = str(info.get("msg", ""))
    try:
        error = cls(message)
    except Exception:  # noqa: BLE001 — e.g. UnicodeDecodeError wants five arguments
        error = exception_class(
            {"name": cls.__name__, "module": cls.__module__, "mro": ["Exception"]}
        )(message)
    return error


class _MethodRef:
    """A bound method of one of our objects, sent as {"t": "method"}: the peer calls it in one
    request."""

    __slots__ = ("obj", "name")

    def __init__(self, obj, name):
        self.obj, self.name = obj, name


# ---------------------------------------------------------------- the codec


class Codec:
    """Encodes values into a JSON tree plus byte buffers, and back; what it cannot send by value
    it exports.

    What it cannot send by value becomes a handle; the peer's handles become `proxy_type`
    objects (rpc.Proxy), whose methods are `method_type` (rpc.ProxyMethod).
    """

    proxy_type: type = type(None)
    method_type: type = type(None)

    def __init__(self, side: str):
        self.side, self.peer = side, "L" if side == "G" else "G"
        self.exports: dict[int, object] = {}  # ref id -> our object the peer holds a handle to
        self._export_ids: dict[int, int] = {}  # id(object) -> ref id
        self.proxies: dict[int, object] = {}  # ref id -> our proxy of the peer's object
        self.methods: set[tuple[str, str]] = (
            set()
        )  # (class name, attribute) the peer said are methods

    def enc(self, x, bufs: list, depth: int = 0):
        if depth > 64:
            raise ValueError("the value is nested more than 64 levels deep")
        if x is None or type(x) in (bool, int, float, str):
            return x
        if isinstance(x, _MethodRef):
            return {"t": "method", "ref": self._export(x.obj), "name": x.name}
        for plain in (
            bool,
            int,
            float,
            str,
        ):  # subclasses (IntEnum, ...) travel as the plain type
            if isinstance(x, plain):
                return plain(x)
        torch = _torch()
        if torch is not None:
            if isinstance(x, torch.Tensor):
                return self._enc_tensor(x, bufs)
            if isinstance(x, torch.Size):
                return {"t": "size", "v": [int(v) for v in x]}
            if isinstance(x, torch.dtype):
                return {"t": "dtype", "v": str(x).removeprefix("torch.")}
            if isinstance(x, torch.device):
                return {"t": "device", "v": str(x)}
            if isinstance(x, torch.Generator):
                return {
                    "t": "gen",
                    "device": str(x.device),
                    "b": self._buf(bufs, x.get_state().numpy().tobytes()),
                }
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.generic):
            return self.enc(x.item(), bufs, depth + 1)
        if np is not None and isinstance(x, np.ndarray) and torch is not None:
            return self._enc_tensor(torch.from_numpy(x), bufs)
        if isinstance(x, self.proxy_type) and x._ep is self:
            return {"t": "ref", "side": self.peer, "id": x._id}
        if isinstance(x, (list, tuple, set, frozenset)):
            kind = "list" if isinstance(x, list) else "tuple" if isinstance(x, tuple) else "set"
            return {"t": kind, "v": [self.enc(v, bufs, depth + 1) for v in x]}
        if isinstance(x, dict):
            return {
                "t": "dict",
                "v": [
                    [self.enc(k, bufs, depth + 1), self.enc(v, bufs, depth + 1)]
                    for k, v in x.items()
                ],
            }
        if isinstance(x, (bytes, bytearray)):
            return {"t": "bytes", "b": self._buf(bufs, bytes(x))}
        if isinstance(x, complex):
            return {"t": "complex", "v": [x.real, x.imag]}
        if isinstance(x, slice):
            return {
                "t": "slice",
                "v": [self.enc(v, bufs, depth + 1) for v in (x.start, x.stop, x.step)],
            }
        if x is Ellipsis:
            return {"t": "ellipsis"}
        if isinstance(x, type) and issubclass(x, BaseException):
            return {"t": "exc_class", "v": describe_class(x)}
        if (
            dataclasses.is_dataclass(x)
            and not isinstance(x, type)
            and type(x).__module__.startswith("minillm.")
        ):
            fields = {
                f.name: self.enc(getattr(x, f.name), bufs, depth + 1)
                for f in dataclasses.fields(x)
            }
            return {
                "t": "dc",
                "module": type(x).__module__,
                "name": type(x).__qualname__,
                "v": fields,
            }
        return self._export(x)

    def _enc_tensor(self, t, bufs: list) -> dict:
        t = t.detach()
        device = str(t.device)
        t = t.cpu().contiguous()
        raw = t.reshape(-1).view(_torch().uint8).numpy().tobytes() if t.numel() else b""
        return {
            "t": "tensor",
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "device": device,
            "b": self._buf(bufs, raw),
        }

    @staticmethod
    def _buf(bufs: list, raw: bytes) -> int:
        bufs.append(raw)
        return len(bufs) - 1

    def _export(self, x) -> dict:
        ref = self._export_ids.get(id(x))
        if ref is None:
            ref = len(self.exports) + 1
            self.exports[ref] = x  # kept alive, so id(x) stays unique for the session
            self._export_ids[id(x)] = ref
        name = getattr(x, "__qualname__", None) if callable(x) else None
        return {
            "t": "ref",
            "side": self.side,
            "id": ref,
            "cls": type(x).__name__,
            "name": name if isinstance(name, str) else None,
        }

    # ---------------------------------------------------------- trees + buffers -> values
    def dec(self, t, bufs: list, depth: int = 0):
        if depth > 64:
            raise ProtocolError("value nested too deeply")
        if t is None or type(t) in (bool, int, float, str):
            return t
        if not isinstance(t, dict):
            raise ProtocolError(f"unexpected {type(t).__name__} in a value")
        tag = t.get("t")
        if tag in ("list", "tuple", "set"):
            items = [self.dec(v, bufs, depth + 1) for v in self._list(t.get("v"))]
            return items if tag == "list" else tuple(items) if tag == "tuple" else set(items)
        if tag == "dict":
            pairs = [self._list(p) for p in self._list(t.get("v"))]
            if any(len(p) != 2 for p in pairs):
                raise ProtocolError("a dict entry is not a pair")
            return {
                self.dec(k, bufs, depth + 1): self.dec(v, bufs, depth + 1) for k, v in pairs
            }
        if tag == "tensor":
            return self._dec_tensor(t, bufs)
        if tag == "ref":
            return self._dec_ref(t)
        if tag == "method":
            obj = self._dec_ref(t.get("ref") if isinstance(t.get("ref"), dict) else {})
            name = t.get("name")
            if not isinstance(name, str):
                raise ProtocolError("a method without a name")
            if not isinstance(obj, self.proxy_type):
                return getattr(obj, name)
            self.methods.add((obj._cls, name))
            return self.method_type(obj, name)
        torch = _torch()
        if tag == "size" and torch is not None:
            return torch.Size([int(v) for v in self._list(t.get("v"))])
        if tag == "dtype" and torch is not None and t.get("v") in DTYPES:
            return getattr(torch, t["v"])
        if tag == "device" and torch is not None and isinstance(t.get("v"), str):
            return torch.device(t["v"])
        if tag == "gen" and torch is not None:
            g = torch.Generator(device=torch.device(str(t.get("device", "cpu"))))
            g.set_state(
                torch.frombuffer(bytearray(self._take(bufs, t.get("b"))), dtype=torch.uint8)
            )
            return g
        if tag == "bytes":
            return self._take(bufs, t.get("b"))
        if tag == "complex":
            re, im = self._list(t.get("v"))
            return complex(float(re), float(im))
        if tag == "slice":
            return slice(*[self.dec(v, bufs, depth + 1) for v in self._list(t.get("v"))][:3])
        if tag == "ellipsis":
            return Ellipsis
        if tag == "exc_class" and isinstance(t.get("v"), dict):
            return exception_class(t["v"])
        if tag == "dc":
            return self._dec_dataclass(t, bufs, depth)
        raise ProtocolError(f"unknown value tag {tag!r}")

    @staticmethod
    def _list(v) -> list:
        if not isinstance(v, list):
            raise ProtocolError("expected a list in a value")
        return v

    @staticmethod
    def _take(bufs: list, index) -> bytes:
        if type(index) is not int or not 0 <= index < len(bufs):
            raise ProtocolError("a value names a buffer that was not sent")
        return bufs[index]

    def _dec_tensor(self, t: dict, bufs: list):
        torch = _torch()
        dtype, shape = t.get("dtype"), t.get("shape")
        if (
            torch is None
            or dtype not in DTYPES
            or not isinstance(shape, list)
            or len(shape) > 16
            or any(type(s) is not int or s < 0 for s in shape)
        ):
            raise ProtocolError("a tensor with an invalid dtype or shape")
        dt = getattr(torch, dtype)
        numel = 1
        for s in shape:
            numel *= s
        raw = self._take(bufs, t.get("b"))
        if len(raw) != numel * torch.empty((), dtype=dt).element_size():
            raise ProtocolError(f"a tensor of shape {shape} came with {len(raw)} bytes")
        out = (
            torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape)
            if numel
            else torch.empty(shape, dtype=dt)
        )
        device = str(t.get("device", "cpu"))
        if device != "cpu" and device.startswith("cuda") and torch.cuda.is_available():
            out = out.to(device)
        return out

    def _dec_ref(self, t: dict):
        ref, side = t.get("id"), t.get("side")
        if type(ref) is not int:
            raise ProtocolError("a handle without an id")
        if side == self.side:
            if ref not in self.exports:
                raise ProtocolError(f"a handle to object {ref}, which was never shared")
            return self.exports[ref]
        if side != self.peer:
            raise ProtocolError("a handle from nowhere")
        proxy = self.proxies.get(ref)
        if proxy is None:
            proxy = object.__new__(self.proxy_type)
            for slot, value in (
                ("_ep", self),
                ("_id", ref),
                ("_cls", str(t.get("cls", "object"))),
                ("_name", t.get("name") if isinstance(t.get("name"), str) else None),
            ):
                object.__setattr__(proxy, slot, value)
            self.proxies[ref] = proxy
        return proxy

    def _dec_dataclass(self, t: dict, bufs: list, depth: int):
        module, name, fields = (
            sys.modules.get(str(t.get("module"))),
            str(t.get("name")),
            t.get("v"),
        )
        cls = module
        for part in name.split("."):
            cls = getattr(cls, part, None)
        if (
            module is None
            or not str(t.get("module")).startswith("minillm.")
            or not isinstance(cls, type)
            or not dataclasses.is_dataclass(cls)
            or not isinstance(fields, dict)
        ):
            raise ProtocolError(f"{t.get('module')}.{name} is not one of minillm's dataclasses")
        names = [f.name for f in dataclasses.fields(cls)]
        if sorted(fields) != sorted(names):
            raise ProtocolError(f"{name} needs the fields {names}")
        obj = cls.__new__(
            cls
        )  # rebuilt field by field: no __init__ runs on values from the peer
        for field in names:
            object.__setattr__(obj, field, self.dec(fields[field], bufs, depth + 1))
        return obj

    # ---------------------------------------------------------- framing


def show(x, limit: int = 12) -> str:
    """A short, stable rendering of a value for a failure message."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if x.numel() <= limit:
            return f"tensor({show(x.tolist(), limit)})"
        return f"tensor of shape {list(x.shape)}, dtype {x.dtype}"
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, (list, tuple)):
        items = [show(v, limit) for v in list(x)[:limit]]
        if len(x) > limit:
            items.append(f"... ({len(x)} items)")
        text = ", ".join(items)
        return f"[{text}]" if isinstance(x, list) else f"({text}{',' if len(x) == 1 else ''})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {show(v, limit)}" for k, v in x.items()) + "}"
    return repr(x)
