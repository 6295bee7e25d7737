"""paged.py — a paged KV cache: fixed-size blocks from one shared pool, found through block tables.

A request no longer owns a max-length slot. Its K/V live in `block_size`-token blocks anywhere in the
pool; its block table lists them in order, so token at position p sits in block
`block_table[p // block_size]`, at offset `p % block_size`. One number, the slot
`block * block_size + offset`, names that place; the slot mapping lists it for every new token.
"""

from __future__ import annotations

from collections import deque

import torch

from minillm.model import causal_attention


class OutOfBlocksError(RuntimeError):
    """The pool cannot satisfy an allocation; nothing was allocated."""


class BlockPool:
    """Hands out block ids; counts references so a later prefix cache can share a block between requests."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks is {num_blocks}: expected at least 1")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_blocks: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    def allocate(self, n: int) -> list[int]:
        """n fresh blocks, or OutOfBlocksError with the pool unchanged (all or nothing)."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks: expected n >= 0")
        if n > self.num_free:
            raise OutOfBlocksError(f"asked for {n} blocks but only {self.num_free} of {self.num_blocks} are free")
        blocks = [self.free_blocks.popleft() for _ in range(n)]
        for b in blocks:
            self.ref_counts[b] = 1
        return blocks

    def share(self, blocks: list[int]) -> None:
        """One more owner for each (already allocated) block."""
        self._check_owned(blocks)
        for b in blocks:
            self.ref_counts[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drop one reference to each block; a block returns to the pool when nobody holds it.

        Every block is checked before any is released, so a bad call leaves the pool unchanged.
        """
        self._check_owned(blocks)
        for b in blocks:
            self.ref_counts[b] -= 1
            if self.ref_counts[b] == 0:
                self.free_blocks.append(b)

    def _check_owned(self, blocks: list[int]) -> None:
        wanted: dict[int, int] = {}
        for b in blocks:
            if not (isinstance(b, int) and 0 <= b < self.num_blocks):
                raise ValueError(f"block {b!r} is not a block id: expected an int in [0, {self.num_blocks})")
            wanted[b] = wanted.get(b, 0) + 1
            if wanted[b] > self.ref_counts[b]:
                raise ValueError(f"block {b} is not allocated (freed twice?): it has {self.ref_counts[b]} owner(s)")


class PagedKVCache:
    """Per layer, K and V storage [num_blocks, block_size, kv_heads, head_dim]."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device="cpu"):
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v [N, kv_heads, hd] of N new tokens at their slots [N]."""
        flat_k = self.k[layer].view(self.num_slots, self.num_kv_heads, self.head_dim)  # a view: writes land in the pool
        flat_v = self.v[layer].view(self.num_slots, self.num_kv_heads, self.head_dim)
        flat_k[slot_mapping] = k
        flat_v[slot_mapping] = v

    def read(self, layer: int, block_table: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` tokens' K and V [length, kv_heads, hd] of one request, in position order."""
        n_blocks = -(-length // self.block_size)
        if n_blocks > len(block_table):
            raise ValueError(f"{length} tokens need {n_blocks} blocks, but the block table has {len(block_table)}")
        idx = torch.tensor(block_table[:n_blocks], device=self.k[layer].device)
        k = self.k[layer][idx].flatten(0, 1)[:length]  # [n_blocks * block_size, KV, hd] -> [length, KV, hd]
        v = self.v[layer][idx].flatten(0, 1)[:length]
        return k, v


def slot_mapping_for(block_table: list[int], positions: list[int], block_size: int) -> list[int]:
    """The slot (block * block_size + offset) where each position's K/V go."""
    slots = []
    for p in positions:
        i = p // block_size
        if p < 0:
            raise ValueError(f"position {p} is negative")
        if i >= len(block_table):
            raise ValueError(f"position {p} needs block {i}, but the block table has {len(block_table)} blocks")
        slots.append(block_table[i] * block_size + p % block_size)
    return slots


def paged_attention(q: torch.Tensor, kv: PagedKVCache, layer: int, block_tables: list[list[int]],
                    seq_lens: list[int], query_start_loc: list[int], scale: float) -> torch.Tensor:
    """Attention for a flat batch: q [N, H, hd] holds every request's new tokens back to back.

    Request i owns queries q[query_start_loc[i] : query_start_loc[i+1]] and a context of seq_lens[i]
    tokens, read through its block table. Its n new tokens are the last n of that context, so the
    causal mask is aligned to the end: new token j (at position seq_len - n + j) sees 0..seq_len - n + j.
    This is the readable reference: one attention call per request.
    """
    out = torch.empty_like(q)
    for i, (table, seq_len) in enumerate(zip(block_tables, seq_lens)):
        start, end = query_start_loc[i], query_start_loc[i + 1]
        if end - start > seq_len:
            raise ValueError(f"request {i} has {end - start} new tokens but a context of only {seq_len}")
        k, v = kv.read(layer, table, seq_len)  # [seq_len, KV, hd]
        out[start:end] = causal_attention(q[None, start:end], k[None], v[None], scale)[0]
    return out
