"""slot_timing.py — chapter 3's decode-step timers: N forwards, one forward over shared slots,
one forward over private caches, and the parts of the step timed alone.

The chapter prints the tables; the set-up lives here so that section 5 reads as a measurement.
Every way returned by `decode_ways` runs the same step again and again: none advances an offset.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from minillm.kv_cache import KVCache
from minillm.model import Transformer
from minillm.slots import (
    PrivateBatchView,
    SlotBatchView,
    SlotKVCache,
    SlotView,
    _padded,
    gather_rows,
    write_rows,
)


def decode_ways(model: Transformer, n: int) -> tuple[list[int], dict[str, Callable]]:
    """n slots with histories of 1 to 199 tokens (random K/V, seeded by n), one new token each.

    Returns the n history lengths and the ways to run or take apart that decode step:
    "serial" (n forwards, one `SlotView` each), "shared" (one forward, `SlotBatchView`),
    "private" (one forward over n private chapter-2 caches holding the same K/V,
    `PrivateBatchView`), "head" (the LM head on n rows), "attention" (the shared forward's
    backend in every layer), and each backend's K/V store and gather alone: "write, shared" /
    "write, private", "gather, shared" / "gather, private".
    """
    cfg = model.cfg
    big = SlotKVCache.for_model(model, max_batch=n, max_ctx=256)
    gen = torch.Generator().manual_seed(n)
    for t in big.k + big.v:
        t.normal_(generator=gen)
    for i in range(n):
        big.allocate_slot(i)  # request i in slot i
    big.lengths[:] = torch.randint(1, 200, (n,), generator=gen).tolist()
    private = [KVCache.for_model(model, max_len=big.max_ctx) for _ in range(n)]
    for i, c in enumerate(private):  # request i's own cache: a copy of slot i
        for layer in range(cfg.num_hidden_layers):
            c.k[layer][0], c.v[layer][0] = big.k[layer][i], big.v[layer][i]
        c.length = big.lengths[i]
    ids = torch.randint(0, cfg.vocab_size, (n, 1), generator=gen)  # [n, 1]
    pos = torch.tensor(big.lengths)[:, None]  # [n, 1]: each slot's next position
    hidden = torch.randn(n, 1, cfg.hidden_size, generator=gen)  # [n, 1, d]: the head's input
    q = torch.randn(n, 1, cfg.num_attention_heads, cfg.hd, generator=gen)  # [n, 1, H, hd]
    kv = torch.randn(n, 1, cfg.num_key_value_heads, cfg.hd, generator=gen)  # [n, 1, KV, hd]
    rows, longest, layers = torch.arange(n), max(big.lengths) + 1, range(cfg.num_hidden_layers)
    new_kv = [kv[:, 0]] * cfg.num_hidden_layers  # every layer stores the same [n, KV, hd]

    def serial():
        return torch.cat(
            [model(ids[i : i + 1], pos[i : i + 1], SlotView(big, i), [-1]) for i in range(n)]
        )  # [n, 1, V]

    def shared():
        return model(ids, pos, SlotBatchView(big, list(range(n))), [-1])  # [n, 1, V]

    def private_caches():  # n slice writes and a stack of n slices per layer, the same mask
        return model(ids, pos, PrivateBatchView(private), [-1])  # [n, 1, V]

    @torch.no_grad()  # as in the forward, so the head takes the same matrix kernel
    def lm_head():
        return model.lm_head(hidden)  # [n, 1, V]

    def attention():  # store, gather up to the longest history, mask, attend: every layer
        batch = SlotBatchView(big, list(range(n)))
        for layer in layers:
            batch.attend(layer, q, kv, kv, cfg.hd**-0.5)

    def write_shared():  # per layer, K and V: one indexed write each, as SlotBatchView's
        write_rows(big, rows, pos[:, 0], new_kv, new_kv)

    def write_private():  # per layer, K and V: one slice write per cache, as PrivateBatchView's
        for layer in layers:
            for i, c in enumerate(private):
                c.k[layer][0, c.length] = kv[i, 0]
                c.v[layer][0, c.length] = kv[i, 0]

    def gather_shared():  # per layer, K and V: one indexed read [n, longest, KV, hd]
        return gather_rows(big, rows, longest)

    def gather_private():  # per layer, K and V: a stack of n slices, as PrivateBatchView's
        return [
            (
                torch.stack([_padded(c.k[x][0, :longest], longest) for c in private]),
                torch.stack([_padded(c.v[x][0, :longest], longest) for c in private]),
            )
            for x in layers
        ]

    ways = {
        "serial": serial,
        "shared": shared,
        "private": private_caches,
        "head": lm_head,
        "attention": attention,
        "write, shared": write_shared,
        "write, private": write_private,
        "gather, shared": gather_shared,
        "gather, private": gather_private,
    }
    return big.lengths, ways


class CountOps(TorchDispatchMode):
    """Counts the operators a call dispatches to PyTorch's kernels, and those among them that
    write into a tensor they are given (copy_, index_put_, ...)."""

    def __init__(self):
        super().__init__()
        self.ops = self.writes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.writes += any(
            a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments
        )
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable) -> CountOps:
    """The operators one call of fn dispatches (`.ops`), and its writes (`.writes`)."""
    with CountOps() as c:
        fn()
    return c


def faults_per_call(fn: Callable, calls: int = 5) -> float:
    """Minor page faults per call of fn, after five untimed calls: each is a 4 KiB page the
    operating system maps in, zeroed, the first time the process touches it."""
    for _ in range(5):
        fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls
