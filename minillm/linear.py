"""linear.py — the one projection path: every `x @ weight.T` of every chapter runs through
`linear`.

On CPU in float32 the weight is packed once into oneDNN's blocked layout and reused, so one
kernel serves a decode step of 1 row as of 16, reading each weight once in a layout both cores
can stream (chapter 6 measures how close that comes to the streaming bandwidth); elsewhere
(CUDA, autograd, plain tensors) it is `F.linear`. `model.pack_for_cpu` packs a whole
model at load.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

# weight -> (a view of the storage it was packed from, that storage's version, the packed copy).
# Keyed by the Parameter's identity (a tied head and its embedding share one entry); the view
# keeps that storage alive, so a weight whose storage or contents changed never matches a stale
# entry.
_PACKED = WeakIdKeyDictionary()


def packable(weight: torch.Tensor) -> bool:
    """A float32 CPU Parameter without autograd in play: the weights `linear` packs for
    oneDNN."""
    return (
        isinstance(weight, nn.Parameter)
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and weight.dim() == 2
        and not weight.is_inference()
        and torch.backends.mkldnn.is_available()
    )


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's blocked copy of `weight`, packed now if it never was or if the weight
    changed."""
    entry = _PACKED.get(weight)
    if (
        entry is None
        or entry[0].data_ptr() != weight.data_ptr()
        or entry[1] != weight._version
        or entry[0].shape != weight.shape
        or entry[0].stride() != weight.stride()
    ):
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
            entry = (weight.detach(), weight._version, packed)
        _PACKED[weight] = entry
    return entry[2]


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [..., in] @ weight.T -> [..., out]: the one place that picks how a projection is
    computed.

    Every path runs through here (chapter 2's `generate`, the slots, the runner, the engine, the
    draft model, each tensor-parallel shard), so a benchmark that compares them compares
    batching, not two matrix kernels. On GPUs `F.linear` (cuBLAS) is the fast call for every row
    count. On CPU in float32 a model's weights are packed once into oneDNN's blocked layout
    (`Transformer.pack_for_cpu`, run when the model is loaded or moved) and every product runs
    oneDNN's linear on it: tiles of the weight lie contiguously in memory, so each core streams
    its own stretch of it, for 1 row as for 16. The plain forms cannot: `F.linear`
    of one row is a matrix-vector product on one core, and of 2 to 8 rows MKL repacks the weight
    on every call (`benchmarks/linear_forms.py` times them side by side). Two other ways to the
    same kernel were not taken: the module of `torch.utils.mkldnn` converts every activation to
    oneDNN's own tensor type and back on each call (no faster in our timing, and two more copies
    per product), and `torch.compile` with frozen weights emits this very oneDNN linear, but
    only after compiling a graph that must cover every flat batch shape the engine runs. A
    weight changed after packing is packed again before its next product (`packed_weight` keys
    on its storage and version), so a stale copy is never served.
    """
    if (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and packable(weight)
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
    ):
        return torch.ops.mkldnn._linear_pointwise(
            x, packed_weight(weight), None, "none", [], ""
        )
    return F.linear(x, weight)


def unpack(weight: torch.Tensor) -> None:
    """Drop the packed copy of `weight` (it left the CPU, or is no longer a projection's
    weight)."""
    _PACKED.pop(weight, None)
