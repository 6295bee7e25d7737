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

    @property
    def num_allocated(self) -> int:
        """Blocks with at least one owner; num_free + num_allocated == num_blocks always."""
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> list[int]:
        """n fresh blocks, or OutOfBlocksError with the pool unchanged (all or nothing)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"cannot allocate {n!r} blocks: expected an int n >= 0")
        if n > self.num_free:
            raise OutOfBlocksError(f"asked for {n} blocks but only {self.num_free} of {self.num_blocks} are free")
        blocks = [self.free_blocks.popleft() for _ in range(n)]
        for b in blocks:
            self.ref_counts[b] = 1
        return blocks

    def share(self, blocks: list[int]) -> None:
        """One more owner for each (already allocated) block."""
        for b in blocks:
            self._check_id(b)
            if self.ref_counts[b] == 0:
                raise ValueError(f"block {b} is free: only an allocated block can be shared")
        for b in blocks:
            self.ref_counts[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drop one reference to each block; a block returns to the pool when nobody holds it.

        Every block is checked before any is released, so a bad call (a double free) leaves the pool unchanged.
        """
        drops: dict[int, int] = {}
        for b in blocks:
            self._check_id(b)
            drops[b] = drops.get(b, 0) + 1
            if drops[b] > self.ref_counts[b]:
                raise ValueError(f"block {b} is not allocated (freed twice?): it has {self.ref_counts[b]} owner(s)")
        for b in blocks:
            self.ref_counts[b] -= 1
            if self.ref_counts[b] == 0:
                self.free_blocks.append(b)

    def _check_id(self, b) -> None:
        if not (isinstance(b, int) and not isinstance(b, bool) and 0 <= b < self.num_blocks):
            raise ValueError(f"block {b!r} is not a block id: expected an int in [0, {self.num_blocks})")


class PagedKVCache:
    """Per layer, K and V storage [num_blocks, block_size, kv_heads, head_dim]."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device="cpu"):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks={num_blocks}, block_size={block_size}: expected both >= 1")
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
        expected = (slot_mapping.shape[0], self.num_kv_heads, self.head_dim)
        if tuple(k.shape) != expected or tuple(v.shape) != expected:
            raise ValueError(f"k, v have shapes {tuple(k.shape)}, {tuple(v.shape)}: expected {expected} "
                             f"(one row per slot in the slot mapping)")
        bad = (slot_mapping < 0) | (slot_mapping >= self.num_slots)
        if bad.any():  # checked before writing, so a bad mapping leaves the pool as it was
            raise ValueError(f"slot {int(slot_mapping[bad][0])} is outside the pool: "
                             f"expected 0 <= slot < {self.num_slots}")
        flat_k = self.k[layer].view(self.num_slots, self.num_kv_heads, self.head_dim)  # a view: writes land in the pool
        flat_v = self.v[layer].view(self.num_slots, self.num_kv_heads, self.head_dim)
        flat_k[slot_mapping] = k
        flat_v[slot_mapping] = v

    def read(self, layer: int, block_table: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` tokens' K and V [length, kv_heads, hd] of one request, in position order."""
        if length < 0:
            raise ValueError(f"length {length} is negative")
        n_blocks = num_blocks_for(length, self.block_size)
        if n_blocks > len(block_table):
            raise ValueError(f"{length} tokens need {n_blocks} blocks, but the block table has {len(block_table)}")
        idx = torch.tensor(block_table[:n_blocks], device=self.k[layer].device)
        k = self.k[layer][idx].flatten(0, 1)[:length]  # [n_blocks * block_size, KV, hd] -> [length, KV, hd]
        v = self.v[layer][idx].flatten(0, 1)[:length]
        return k, v


def num_blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks a request of num_tokens tokens needs: the last block may be partly empty."""
    return -(-num_tokens // block_size)


def slot_mapping_for(block_table: list[int], positions: list[int], block_size: int) -> list[int]:
    """The slot (block * block_size + offset) where each position's K/V go."""
    if block_size < 1:
        raise ValueError(f"block_size is {block_size}: expected at least 1")
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
    check_attention_inputs(q, kv, block_tables, seq_lens, query_start_loc)
    out = torch.empty_like(q)
    for i, (table, seq_len) in enumerate(zip(block_tables, seq_lens)):
        start, end = query_start_loc[i], query_start_loc[i + 1]
        k, v = kv.read(layer, table, seq_len)  # [seq_len, KV, hd], gathered from the request's blocks
        out[start:end] = causal_attention(q[None, start:end], k[None], v[None], scale)[0]
    return out


def paged_decode_attention(q: torch.Tensor, kv: PagedKVCache, layer: int, block_tables: list[list[int]],
                           seq_lens: list[int], scale: float) -> torch.Tensor:
    """The decode case in one attention call: q [B, H, hd] is one new token per request, the last of its context.

    Gather every request's blocks into a padded [B, max_blocks * block_size, KV, hd] batch and mask the
    padding: a lone last token sees its whole context, so "key position < seq_len" is the only mask needed.
    """
    B = q.shape[0]
    check_attention_inputs(q, kv, block_tables, seq_lens, list(range(B + 1)))
    device, bs = q.device, kv.block_size
    max_blocks = max(num_blocks_for(n, bs) for n in seq_lens)
    padded = [list(t[:num_blocks_for(n, bs)]) + [0] * (max_blocks - num_blocks_for(n, bs))  # block 0 as filler
              for t, n in zip(block_tables, seq_lens)]
    tables = torch.tensor(padded, dtype=torch.long, device=device)  # [B, max_blocks]
    k = kv.k[layer][tables].flatten(1, 2)  # [B, max_blocks, bs, KV, hd] -> [B, L, KV, hd]
    v = kv.v[layer][tables].flatten(1, 2)
    H, KV = q.shape[1], k.shape[2]
    G = H // KV  # GQA: query heads per KV head, handled by a reshape instead of copying K/V G times
    lens = torch.tensor(seq_lens, device=device)
    mask = torch.arange(k.shape[1], device=device)[None, :] < lens[:, None]  # [B, L]: real tokens only
    qg = q.view(B, KV, G, q.shape[2])  # [B, KV, G, hd]
    scores = torch.matmul(qg, k.permute(0, 2, 3, 1)) * scale  # [B, KV, G, L]
    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    o = torch.matmul(scores.softmax(dim=-1), v.transpose(1, 2))  # [B, KV, G, hd]
    return o.reshape(B, H, q.shape[2])


def check_attention_inputs(q: torch.Tensor, kv: PagedKVCache, block_tables: list[list[int]],
                           seq_lens: list[int], query_start_loc: list[int]) -> None:
    """Every way the metadata can disagree with itself, named, before any attention is computed."""
    B = len(seq_lens)
    if q.dim() != 3:
        raise ValueError(f"q has shape {tuple(q.shape)}: expected [N, heads, head_dim]")
    if q.shape[1] % kv.num_kv_heads or q.shape[2] != kv.head_dim:
        raise ValueError(f"q has {q.shape[1]} heads of dim {q.shape[2]}: expected a multiple of "
                         f"{kv.num_kv_heads} KV heads, of dim {kv.head_dim}")
    if len(block_tables) != B or len(query_start_loc) != B + 1:
        raise ValueError(f"{B} seq_lens, {len(block_tables)} block tables and {len(query_start_loc)} "
                         f"query_start_loc entries: expected B, B and B + 1")
    if B == 0 or query_start_loc[0] != 0 or query_start_loc[-1] != q.shape[0]:
        raise ValueError(f"query_start_loc {query_start_loc} must run from 0 to the {q.shape[0]} rows of q")
    for i in range(B):
        n = query_start_loc[i + 1] - query_start_loc[i]
        if not 1 <= n <= seq_lens[i]:
            raise ValueError(f"request {i} has {n} new tokens and a context of {seq_lens[i]}: "
                             f"expected 1 <= new tokens <= context")
        need = num_blocks_for(seq_lens[i], kv.block_size)
        if need > len(block_tables[i]):
            raise ValueError(f"request {i} has {seq_lens[i]} tokens, which need {need} blocks, "
                             f"but its block table has {len(block_tables[i])}")
        bad = [b for b in block_tables[i][:need] if not 0 <= b < kv.num_blocks]
        if bad:
            raise ValueError(f"request {i}'s block table holds block {bad[0]}: expected 0 <= block < {kv.num_blocks}")
