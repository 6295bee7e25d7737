"""traffic.py — what a kernel launch would cost a GPU in memory reads, counted without a GPU.

Two ways to the same numbers. `count_traffic()` watches Triton's interpreter while it runs a
launch: every `tl.load` reports the addresses of its unmasked lanes, and each address is
charged to the kernel argument (tensor) it falls in; every program of the grid is counted. The
model functions (`varlen_traffic`, `split_decode_traffic`) compute the same counts from the
launch grid and the kernels' loop bounds alone, so they also answer for shapes far too large to
interpret (a 32K context of a real model). Tests check the two against each other.

A count is of elements read by programs, not of DRAM traffic: on a GPU, two programs that read
the same K row may both miss the caches, or the second may hit L2. The count is what the kernel
asks for; the reload factor (elements read over distinct elements) says how much it asks twice.

The torch reference the kernels replace (chapter 4's `PagedAttention.decode` and `.varlen`) is
counted the same two ways: `count_torch_ops()` watches the aten operations it runs, and
`torch_reference_traffic` computes the same counts from its code. An operation is charged the
distinct K/V elements it reads and writes, like a launch's `kv_distinct`: what one launch or one
operation reads again (another query head, another query tile) is left to the caches, on both
sides, so kernels and reference can be compared under one rule.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from minillm.kernels.triton_runtime import H100_SMS, interpreting


@dataclass
class Traffic:
    """Elements loaded per kernel argument, over all programs of one or more launches."""

    launches: int = 0  # kernel launches (one grid each)
    programs: int = 0  # grid points launched (a program that returns at once counts too)
    loaded: dict[str, int] = field(default_factory=dict)  # argument name -> elements read
    distinct: dict[str, set] = field(default_factory=dict)  # argument name -> addresses read
    itemsize: dict[str, int] = field(default_factory=dict)  # argument name -> bytes per element
    busy: dict[str, int] = field(default_factory=dict)  # argument name -> programs that read it

    def reload_factor(self, name: str) -> float:
        """Elements of `name` read over distinct elements read (1.0: nothing read twice)."""
        return self.loaded[name] / len(self.distinct[name])


def _extent(t) -> tuple[int, int]:
    """[first, last] byte address a strided tensor view can touch."""
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    return t.data_ptr(), t.data_ptr() + (span + 1) * t.element_size() - 1


@contextlib.contextmanager
def count_traffic():
    """Count, for every interpreted launch inside the block, the launch, the programs run and
    the elements each tensor argument gives its loads. Yields a Traffic filled in as the
    launches run."""
    if not interpreting():
        raise RuntimeError(
            "count_traffic needs Triton's interpreter (TRITON_INTERPRET=1): compiled kernels "
            "do not report their loads"
        )
    from triton.runtime import interpreter

    traffic = Traffic()
    builder = interpreter.interpreter_builder
    executor = interpreter.GridExecutor
    ranges: list[tuple[int, int, str]] = []  # (first, last, name): this launch's tensors
    seen_by: dict[str, tuple] = {}  # argument name -> the last program that read it
    original_init, original_load = executor._init_args_hst, builder.create_masked_load
    original_grid_idx = builder.set_grid_idx

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
        traffic.launches += 1  # called once per launch, before its first program
        named = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
        seen_by.clear()
        ranges[:] = sorted(
            (*_extent(arg), name) for name, arg in named.items() if hasattr(arg, "data_ptr")
        )
        for _, _, name in ranges:
            traffic.itemsize[name] = named[name].element_size()
        return args_hst, kwargs_hst

    def set_grid_idx(x, y, z):
        traffic.programs += 1
        return original_grid_idx(x, y, z)

    def load(ptrs, mask, other, cache_policy, is_volatile):
        addresses = np.asarray(ptrs.data)[np.asarray(mask.data, dtype=bool)].ravel()
        starts = np.array([first for first, _, _ in ranges], dtype=np.uint64)
        which = np.searchsorted(starts, addresses.astype(np.uint64), side="right") - 1
        for i in np.unique(which):
            first, last, name = ranges[i]
            hit = addresses[which == i]
            if hit.max() > last:
                raise AssertionError(f"a load reads past the end of {name}")
            traffic.loaded[name] = traffic.loaded.get(name, 0) + hit.size
            traffic.distinct.setdefault(name, set()).update(hit.tolist())
            if seen_by.get(name) != builder.grid_idx:
                seen_by[name] = builder.grid_idx
                traffic.busy[name] = traffic.busy.get(name, 0) + 1
        return original_load(ptrs, mask, other, cache_policy, is_volatile)

    executor._init_args_hst = init_args
    builder.create_masked_load = load
    builder.set_grid_idx = set_grid_idx
    try:
        yield traffic
    finally:
        executor._init_args_hst = original_init
        del builder.create_masked_load, builder.set_grid_idx  # back to the class's methods


# aten operations that relabel a tensor (or only allocate one): no data moved, not counted
_NO_LAUNCH = {
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.expand.default",
    "aten.permute.default",
    "aten.transpose.int",
    "aten.unsqueeze.default",
    "aten.select.int",
    "aten.slice.Tensor",
    "aten.empty_like.default",
    "aten.empty.memory_format",
}
# aten operations that copy their input: a copy of K/V is K/V too
_COPIES = {
    "aten.index.Tensor",
    "aten.index_select.out",
    "aten.clone.default",
    "aten.copy_.default",
}
_GATHERS = {"aten.index.Tensor", "aten.index_select.out"}  # read only the rows they take
_IN_PLACE = {"aten.masked_fill_.Scalar"}  # rewrites its first operand: a K/V copy written
_ROW_FILLS = {"aten.index_fill_.int_Scalar"}  # writes only the rows its index names


@dataclass
class TorchCost:
    """What the torch reference asks of a GPU in one layer: its operations and the K/V they
    move."""

    operations: int = 0  # aten operations that compute or copy, as torch's dispatcher sees them
    kv_read: int = 0  # K and V elements read, every operation together
    kv_written: int = 0  # K and V elements written: the copies the reference makes of them
    # what count_torch_ops saw, one entry per operation: (aten name, K/V read, K/V written);
    # left out of ==, so that a count compares equal to the computed totals
    ops: list[tuple[str, int, int]] = field(default_factory=list, compare=False, repr=False)

    def kv_bytes(self, bytes_per_number: int = 2) -> int:
        """Bytes of K/V read and written."""
        return (self.kv_read + self.kv_written) * bytes_per_number


@contextlib.contextmanager
def count_torch_ops(k_cache, v_cache):
    """Count the aten operations run inside the block and the K/V elements they read and write.

    K/V is the storage of the two caches and every copy made of it (a gather, a clone). An
    operation reads the distinct elements of each K/V operand (a K expanded to all query heads,
    a stride-0 view, is read once, not once per query head), except a gather, which reads only
    the rows it takes. Views move no data and are not counted. `ops` lists each counted
    operation in order.
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    cost = TorchCost()
    kv_storages = {k_cache.untyped_storage().data_ptr(), v_cache.untyped_storage().data_ptr()}
    kept = []  # the K/V copies, held so that no later tensor reuses their memory

    def is_kv(t) -> bool:
        return isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in kv_storages

    def distinct(t) -> int:
        """Elements t addresses: a stride-0 dimension (an expand) repeats the same ones."""
        return math.prod(n for n, s in zip(t.shape, t.stride()) if s != 0)

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func)
            if name in _NO_LAUNCH:
                return out
            cost.operations += 1
            inputs = tree_flatten((args, kwargs or {}))[0]
            if name == "aten.copy_.default":
                inputs = inputs[1:]  # copy_(dest, src) reads only src
            read = [t for t in inputs if is_kv(t)]
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if name in _GATHERS and read:
                kv_read = outputs[0].numel()  # a gather reads the rows it takes
            elif name in _ROW_FILLS:
                kv_read = 0  # index_fill_(self, dim, index, value) reads none of self
            else:
                kv_read = sum(distinct(t) for t in read)
            kv_written = 0
            if name in _COPIES and read:
                for t in outputs:
                    kv_written += t.numel()
                    kv_storages.add(t.untyped_storage().data_ptr())
                    kept.append(t)
            if name in _IN_PLACE and is_kv(inputs[0]):
                kv_written += inputs[0].numel()
            if name in _ROW_FILLS and is_kv(args[0]):
                self_, dim, index = args[0], args[1], args[2]
                kv_written += index.numel() * self_.numel() // self_.shape[dim]
            cost.kv_read += kv_read
            cost.kv_written += kv_written
            cost.ops.append((name, kv_read, kv_written))
            return out

    with Counter():
        yield cost


def torch_reference_traffic(
    seq_lens, query_lens, num_heads, num_kv_heads, head_dim, block_size=16
) -> TorchCost:
    """Chapter 4's PagedAttention in one layer, from its code: `decode` for a step of decodes
    only, `varlen` (one attention call per request) for any other step."""
    kv_row = num_kv_heads * head_dim  # elements of one position's K (or V), all KV heads
    if all(n == 1 for n in query_lens):
        # decode: K and V each gathered through the block tables padded to the longest into
        # the cache's buffers, [B, L, KV, hd] (a read and a write); the rows past each context
        # zeroed in K and in V (a write of those rows); one scaled_dot_product_attention over
        # strided views, reading both. Operations: 2 gathers, 2 fills, and the attention call
        # (on the CPU: 2 scalar_tensor, a where for the mask, the attention itself).
        rows = len(seq_lens) * max(math.ceil(n / block_size) for n in seq_lens) * block_size
        hidden = rows - sum(seq_lens)  # padded rows past each context
        return TorchCost(8, 4 * rows * kv_row, 2 * (rows + hidden) * kv_row)
    cost = TorchCost()
    for seq_len in seq_lens:
        gathered = math.ceil(seq_len / block_size) * block_size * kv_row  # whole blocks
        repeated = seq_len * num_heads * head_dim  # K (or V) copied to every query head
        # varlen, per request: K and V each gathered (a read and a write), repeated to the
        # query heads by repeat_interleave (a read of the request's seq_len rows, a write of
        # every copy) and read by scaled_dot_product_attention. Operations: 2 gathers, 2
        # repeats, the mask (ones, tril; in attention 2 scalars and a where), the attention,
        # the copy into the output.
        cost.operations += 11
        cost.kv_read += 2 * (gathered + seq_len * kv_row + repeated)
        cost.kv_written += 2 * (gathered + repeated)
    return cost


@dataclass
class LaunchCost:
    """What one attention launch asks of a GPU, from its grid and loop bounds."""

    programs: int  # grid points
    busy_programs: int  # programs that read any K/V
    kv_elements: int  # K and V elements read, all programs together, reloads included
    longest_walk: int  # keys the busiest program reads: the launch's critical path
    kv_distinct: int = (
        0  # distinct K and V elements read: each once, the caches serving reloads
    )

    def kv_bytes(self, bytes_per_number: int = 2) -> int:
        """Bytes of K/V the loads ask for, reloads included."""
        return self.kv_elements * bytes_per_number

    def distinct_bytes(self, bytes_per_number: int = 2) -> int:
        """Bytes of distinct K/V read: the launch's floor if the caches serve every reload."""
        return self.kv_distinct * bytes_per_number

    def waves(self, sms: int = H100_SMS) -> int:
        """Rounds of busy programs over `sms` multiprocessors, one program each at a time."""
        return math.ceil(self.busy_programs / sms)


def varlen_traffic(seq_lens, query_lens, num_heads, num_kv_heads, head_dim, block_q=16):
    """The mixed-batch kernel (triton_attention.py): one program per (request, query tile,
    query head), each reading K and V for keys 0 .. its tile's last row's position."""
    tiles = max(math.ceil(n / block_q) for n in query_lens)
    busy, elements, longest = 0, 0, 0
    for seq_len, q_len in zip(seq_lens, query_lens):
        for tile in range(math.ceil(q_len / block_q)):
            kv_end = min(seq_len, seq_len - q_len + (tile + 1) * block_q)
            busy += num_heads
            elements += num_heads * 2 * kv_end * head_dim  # each query head reloads its K/V
            longest = max(longest, kv_end)
    # the last tile of each request reads its whole context: every key, once per KV head
    distinct = sum(seq_lens) * num_kv_heads * 2 * head_dim
    grid = len(seq_lens) * tiles * num_heads
    return LaunchCost(grid, busy, elements, longest, distinct)


def split_decode_traffic(seq_lens, num_heads, num_kv_heads, head_dim, segment=256):
    """The flash-decoding kernel (split_decode.py): one program per (request, KV head,
    segment), the group's query heads packed into its rows, so each K/V row is read once."""
    del num_heads  # the grid has one program per KV head, whatever the group
    segments = [math.ceil(n / segment) for n in seq_lens]
    busy = sum(segments) * num_kv_heads
    elements = sum(seq_lens) * num_kv_heads * 2 * head_dim
    longest = min(segment, max(seq_lens))
    grid = len(seq_lens) * num_kv_heads * max(segments)
    return LaunchCost(grid, busy, elements, longest, elements)  # nothing read twice
