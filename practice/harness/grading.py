"""grading.py — what every exercise's tests share: comparisons with messages a reader can act
on.

What was expected, what came back, and where the two first differ. The values compared came back
from the reader's process (practice/harness/remote.py); everything here runs in the grader,
where the reader's code never does. Standard library only; torch is imported when a tensor is
compared.
"""

from __future__ import annotations

import math
import sys

from wire import show


def share(obj, *, methods=(), call: bool = False):
    """Let the reader's code call `obj` (call=True) and the named methods of it (see remote.py);
    returns obj."""
    from remote import share as _share

    return _share(obj, methods=methods, call=call)


# ---------------------------------------------------------------- comparisons with readable
#   failures


def fail(message: str):
    raise AssertionError(message)


def check_equal(got, expected, what: str) -> None:
    """got == expected (tensors compare as lists, tuples as lists; a tensor expected as a tensor
    also by its shape, which lists lose when a dimension is 0); on failure, where they
    differ."""
    if _is_tensor(got) and _is_tensor(expected) and tuple(got.shape) != tuple(expected.shape):
        fail(f"{what} has shape {list(got.shape)}; expected {list(expected.shape)}")
    g, e = _plain(got), _plain(expected)
    if g == e:
        return
    lines = [f"{what} is wrong", f"  expected {show(expected)}", f"  got      {show(got)}"]
    if isinstance(g, list) and isinstance(e, list):
        if len(g) != len(e):
            lines.append(
                f"  it has {len(g)} {'entry' if len(g) == 1 else 'entries'}; expected {len(e)}"
            )
        seq_g, seq_e = _sequence(got), _sequence(expected)
        for i, (a, b) in enumerate(zip(g, e)):
            if a != b:
                lines.append(
                    f"  first difference at index {i}: expected {show(seq_e[i])}, got "
                    f"{show(seq_g[i])}"
                )
                break
    fail("\n".join(lines))


def _sequence(x) -> list:
    return x.tolist() if _is_tensor(x) else list(x)


def check_close(
    got, expected, what: str, atol: float = 1e-5, rtol: float = 0.0, dtype=None
) -> None:
    """Tensors equal within atol + rtol * |expected|, of the same shape (and dtype, when
    given)."""
    import torch

    if not isinstance(got, torch.Tensor):
        fail(f"{what} should be a torch.Tensor, got {type(got).__name__}: {show(got)}")
    if tuple(got.shape) != tuple(expected.shape):
        fail(f"{what} has shape {list(got.shape)}; expected {list(expected.shape)}")
    if dtype is not None and got.dtype != dtype:
        fail(f"{what} has dtype {got.dtype}; expected {dtype}")
    g, e = got.detach().cpu().double(), expected.detach().cpu().double()
    broken = ~torch.isfinite(g) & torch.isfinite(e)
    if broken.any():
        i = _index(broken.nonzero()[0])
        fail(
            f"{what} holds {int(broken.sum())} inf/nan values where finite ones were expected\n"
            f"  first at index {i}: expected {e[i].item():.6g}, got {g[i].item()}"
        )
    err = (g - e).abs()
    err[torch.isinf(e) & (g == e)] = 0  # -inf where -inf was expected is right
    tol = atol + rtol * e.abs().nan_to_num(posinf=0.0)
    bad = err > tol
    if bad.any() or err.isnan().any():
        bad = bad | err.isnan()
        i = _index((err - tol).nan_to_num(nan=math.inf).flatten().argmax(), g.shape)
        fail(
            f"{what} is wrong in {int(bad.sum())} of {bad.numel()} entries\n"
            f"  worst at index {i}: expected {e[i].item():.6g}, got {g[i].item():.6g} "
            f"(error {err[i].item():.2g}, allowed {tol[i].item():.2g})"
        )


def check_rounding(got, expected, what: str, max_fraction: float = 0.01) -> None:
    """A half-precision result as one float32 computation rounded once would give: at most one
    unit in the
    last place (ulp) off, in at most `max_fraction` of the entries. Computing in the
    half-precision dtype itself, or rounding twice, misses in far more entries, so this tells
    the two apart where a tolerance cannot."""
    import torch

    check_close(got, expected, what, atol=math.inf, dtype=expected.dtype)
    as_int = {
        torch.float16: torch.int16,
        torch.bfloat16: torch.int16,
        torch.float32: torch.int32,
    }[expected.dtype]
    ulps = (
        got.detach().cpu().view(as_int).long() - expected.detach().cpu().view(as_int).long()
    ).abs()
    off, allowed = int((ulps > 0).sum()), int(max_fraction * ulps.numel())
    if off > allowed or (ulps > 1).any():
        i = _index(ulps.flatten().argmax(), ulps.shape)
        fail(
            f"{what} is not float32 arithmetic rounded once to {expected.dtype}: {off} of "
            f"{ulps.numel()} entries "
            f"differ (at most {allowed} may, by one unit in the last place)\n"
            f"  worst at index {i}: expected {expected[i].item():.6g}, got {got[i].item():.6g} "
            f"({int(ulps[i])} units apart)"
        )


def check_names(error: BaseException, value, what: str) -> None:
    """The error message names the value at fault (`block 7 is ...`), so the reader can
    find it."""
    text = str(value)
    if text not in str(error):
        fail(
            f"the error of {what} should name {text}, so the caller can find it; its message "
            f"was: {error}"
        )


def storage(obj, *path):
    """Where an attribute of the reader's object lives in its process: (object id, data
    pointer).

    Equal before and after a few calls means the object was not reallocated (a preallocated
    buffer)."""
    from remote import identity

    return identity(obj, list(path))[:2]


def defined_in(obj) -> tuple:
    """(module, class name) of the reader's object, or of the reader's class itself: whose code
    is it?"""
    from remote import identity

    return identity(obj, [])[2:4]


def global_random_state(learner) -> str:
    """A digest of the global random state in the reader's process (torch's default generator
    and
    Python's `random`): equal before and after a call means the call left it alone."""
    from remote import identity

    return identity(learner, [])[4]


def launch(kernel, grid, *args, **kwargs) -> list:
    """The reader's Triton kernel launched as kernel[grid](*args, **kwargs) in the reader's
    process,
    on copies of the tensors given; returns the arguments as the kernel left them (what it
    wrote, and where)."""
    from remote import launch as _launch

    return _launch(kernel, grid, args, kwargs)


def check_shape(got, shape, what: str) -> None:
    """A tensor of the given shape."""
    if not _is_tensor(got):
        fail(f"{what} should be a torch.Tensor, got {type(got).__name__}: {show(got)}")
    if tuple(got.shape) != tuple(shape):
        fail(f"{what} has shape {list(got.shape)}; expected {list(shape)}")


def check_raises(error: type[BaseException], fn, *args, what: str, **kwargs) -> BaseException:
    """fn(*args, **kwargs) must raise `error`; returns it so a test can look at its message."""
    try:
        result = fn(*args, **kwargs)
    except error as e:
        return e
    except NotImplementedError:
        raise  # the judge reports it as "not implemented yet"
    except Exception as e:
        fail(f"{what} should raise {error.__name__}, but it raised {type(e).__name__}: {e}")
    fail(f"{what} should raise {error.__name__}, but it returned {show(result)}")


def _plain(x):
    """Tensors as lists, tuples as lists: a reader may return either where a sequence is asked
    for."""
    if _is_tensor(x):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _is_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _index(flat_or_nd, shape=None) -> tuple:
    """A tuple index from a multi-dimensional index tensor, or from a flat index and a shape."""
    if shape is None:
        return tuple(int(v) for v in flat_or_nd)
    flat, out = int(flat_or_nd), []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))
