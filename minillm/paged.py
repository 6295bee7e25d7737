"""paged.py — a paged KV cache: fixed-size blocks from one shared pool, found through block
tables.

A request no longer owns a max-length slot. Its K/V live in `block_size`-token blocks anywhere
in the pool; its block table lists them in order, so token at position p sits in block
`block_table[p // block_size]`, at offset `p % block_size`. One number, the slot `block *
block_size + offset`, names that place; the slot mapping lists it for every new token.

`PagedAttention` is the attention backend the model's forward runs with: built once per forward
from the step's metadata (checked here, on the host), it writes each layer's new K/V through the
slot mapping and attends through the block tables.
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np
import torch
import torch.nn.functional as F

from minillm.checking import as_int, check_int, check_int_list
from minillm.kv_cache import kv_bytes_per_token
from minillm.model import Transformer, causal_attention


class OutOfBlocksError(RuntimeError):
    """The pool cannot satisfy an allocation; nothing was allocated."""


DEFAULT_BLOCK_SIZE = 16  # tokens per block unless a caller picks another


def num_blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks a request of num_tokens tokens needs: the last block may be partly empty."""
    return -(-num_tokens // block_size)


class BlockPool:
    """Hands out block ids; counts references so that requests can share a block (a prefix cache
    does).

    The free list is first in, first out: `allocate` takes ids from its front, `free` appends at
    its back in call order, so the block freed longest ago is reused first.
    """

    def __init__(self, num_blocks: int):
        self.num_blocks = check_int("num_blocks", num_blocks, min=1)
        self.ref_counts = [0] * self.num_blocks
        self.free_blocks: deque[int] = deque(range(self.num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    @property
    def num_allocated(self) -> int:
        """Blocks with at least one owner; num_free + num_allocated == num_blocks always."""
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> list[int]:
        """n fresh blocks, or OutOfBlocksError with the pool unchanged (all or nothing)."""
        if as_int(n) is None or n < 0:
            raise ValueError(f"cannot allocate {n!r} blocks: expected an int n >= 0")
        n = as_int(n)
        if n > self.num_free:
            raise OutOfBlocksError(
                f"asked for {n} blocks but only {self.num_free} of {self.num_blocks} are free"
            )
        blocks = [self.free_blocks.popleft() for _ in range(n)]
        for b in blocks:
            self.ref_counts[b] = 1
        return blocks

    def share(self, blocks: list[int]) -> None:
        """One more owner for each (already allocated) block."""
        blocks = [self._check_id(b) for b in blocks]
        for b in blocks:
            if self.ref_counts[b] == 0:
                raise ValueError(f"block {b} is free: only an allocated block can be shared")
        for b in blocks:
            self.ref_counts[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drop one reference to each block; a block returns to the pool when nobody holds it.

        Every block is checked before any is released, so a bad call (a double free) leaves the
        pool unchanged.
        """
        blocks = [self._check_id(b) for b in blocks]
        drops: dict[int, int] = {}
        for b in blocks:
            drops[b] = drops.get(b, 0) + 1
            if drops[b] > self.ref_counts[b]:
                raise ValueError(
                    f"block {b} is not allocated (freed twice?): it has {self.ref_counts[b]} "
                    "owner(s)"
                )
        for b in blocks:
            self.ref_counts[b] -= 1
            if self.ref_counts[b] == 0:
                self.free_blocks.append(b)

    def _check_id(self, b) -> int:
        i = as_int(b)
        if i is None or not 0 <= i < self.num_blocks:
            raise ValueError(
                f"block {b!r} is not a block id: expected an int in [0, {self.num_blocks})"
            )
        return i


class PagedKVCache:
    """Per layer, K and V storage [num_blocks, block_size, kv_heads, head_dim]."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device="cpu",
    ):
        self.num_layers = check_int("num_layers", num_layers, min=1)
        self.num_blocks = check_int("num_blocks", num_blocks, min=1)
        self.block_size = check_int("block_size", block_size, min=1)
        self.num_kv_heads = check_int("num_kv_heads", num_kv_heads, min=1)
        self.head_dim = check_int("head_dim", head_dim, min=1)
        shape = (self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        self.k = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.num_layers)
        ]
        self.v = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.num_layers)
        ]
        self._gather_buffers: dict[str, torch.Tensor] = {}  # scratch for `gather`, by name

    @classmethod
    def for_model(cls, model: Transformer, num_blocks: int, block_size: int) -> PagedKVCache:
        """A cache shaped for `model`, in its dtype and on its device."""
        cfg, w = model.cfg, model.embed_tokens.weight
        kv_heads = getattr(
            model, "local_kv_heads", cfg.num_key_value_heads
        )  # a tensor-parallel rank's share
        return cls(
            cfg.num_hidden_layers, num_blocks, block_size, kv_heads, cfg.hd, w.dtype, w.device
        )

    @staticmethod
    def bytes_per_block(model: Transformer, block_size: int) -> int:
        cfg, w = model.cfg, model.embed_tokens.weight
        kv_heads = getattr(model, "local_kv_heads", cfg.num_key_value_heads)
        return block_size * kv_bytes_per_token(
            cfg.num_hidden_layers, kv_heads, cfg.hd, w.element_size()
        )

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def device(self) -> torch.device:
        return self.k[0].device

    def write(self, layer: int, slot_mapping, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v [N, kv_heads, hd] of N new tokens at their slots [N]; every argument
        checked first."""
        check_int("layer", layer, min=0, max=self.num_layers - 1)
        slots = check_slots(slot_mapping, self.num_slots)
        expected = (len(slots), self.num_kv_heads, self.head_dim)
        if tuple(k.shape) != expected or tuple(v.shape) != expected:
            raise ValueError(
                f"k, v have shapes {tuple(k.shape)}, {tuple(v.shape)}: expected {expected} "
                f"(one row per slot in the slot mapping)"
            )
        self.store(layer, torch.tensor(slots, dtype=torch.long, device=self.device), k, v)

    def store(
        self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """`write` without the checks, for a step whose metadata was checked once
        (PagedAttention).

        slot_mapping [N] is an index tensor on the cache's device; nothing is read back to the
        host.
        """
        flat = (self.num_slots, self.num_kv_heads, self.head_dim)
        self.k[layer].view(flat).index_copy_(
            0, slot_mapping, k
        )  # a view: the rows land in the blocks
        self.v[layer].view(flat).index_copy_(0, slot_mapping, v)

    def gather(self, layer: int, name: str, blocks: torch.Tensor) -> torch.Tensor:
        """Copies of `blocks` [n] of layer's K or V ("k", "v"): [n, block_size, kv_heads, hd].

        The copy lands in a buffer the cache keeps (grown, never shrunk), overwritten by the
        next gather of the same name: a decode step reuses memory it has already touched instead
        of asking the allocator for fresh pages every layer.
        """
        shape = (blocks.numel(), self.block_size, self.num_kv_heads, self.head_dim)
        n = blocks.numel() * self.block_size * self.num_kv_heads * self.head_dim
        buf = self._gather_buffers.get(name)
        if buf is None or buf.numel() < n:
            buf = self._gather_buffers[name] = torch.empty(
                n, dtype=self.k[0].dtype, device=self.device
            )
        source = self.k[layer] if name == "k" else self.v[layer]
        return torch.index_select(source, 0, blocks, out=buf[:n].view(shape))

    def read(
        self, layer: int, block_table: list[int], length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` tokens' K and V [length, kv_heads, hd] of one request, in position
        order."""
        check_int("layer", layer, min=0, max=self.num_layers - 1)
        length = check_int("length", length, min=0)
        table = check_block_table("block_table", block_table, length, self)
        idx = torch.tensor(table, dtype=torch.long, device=self.device)
        k = self.k[layer][idx].flatten(0, 1)[
            :length
        ]  # [n_blocks * block_size, KV, hd] -> [length, KV, hd]
        v = self.v[layer][idx].flatten(0, 1)[:length]
        return k, v


def slot_mapping_for(
    block_table: list[int], positions: list[int], block_size: int
) -> list[int]:
    """The slot (block * block_size + offset) where each position's K/V go."""
    block_size = check_int("block_size", block_size, min=1)
    slots = []
    for p in positions:
        i = p // block_size
        if p < 0:
            raise ValueError(f"position {p} is negative")
        if i >= len(block_table):
            raise ValueError(
                f"position {p} needs block {i}, but the block table has {len(block_table)} "
                "blocks"
            )
        slots.append(block_table[i] * block_size + p % block_size)
    return slots


class PagedAttention:
    """The attention backend of one forward over a PagedKVCache.

    block_tables [B][blocks], seq_lens [B] (context length once the new tokens are in) and
    query_start_loc [B+1] (request i owns rows query_start_loc[i] : query_start_loc[i+1] of the
    flat batch) are host-side lists; slot_mapping [N] (a list or CPU tensor) says where each new
    token's K/V go, and may be left out when the forward only reads. Everything is checked here,
    once; the device tensors the layers index with (slot mapping, block tables padded to [B,
    max_blocks], lengths) are built here, once, so a layer's attention reads nothing back to the
    host.
    """

    def __init__(
        self, kv: PagedKVCache, block_tables, seq_lens, query_start_loc, slot_mapping=None
    ):
        self.kv = kv
        self.seq_lens, self.query_start_loc, tables = check_paged_metadata(
            kv, block_tables, seq_lens, query_start_loc
        )
        self.num_tokens = self.query_start_loc[-1]
        self.decode_only = self.num_tokens == len(self.seq_lens)  # one new token per request
        device = kv.device
        self.slot_mapping = None
        if slot_mapping is not None:
            slots = check_slots(slot_mapping, kv.num_slots)
            if len(slots) != self.num_tokens:
                raise ValueError(
                    f"slot_mapping has {len(slots)} entries for the {self.num_tokens} new "
                    "tokens "
                    f"that query_start_loc describes: expected one slot per new token"
                )
            self.slot_mapping = torch.tensor(slots, dtype=torch.long, device=device)  # [N]
        self.num_blocks = [len(t) for t in tables]  # [B] blocks each request reads
        width = max(self.num_blocks)
        padded = [
            t + [0] * (width - len(t)) for t in tables
        ]  # block 0 as filler: masked, never seen
        self.block_tables = torch.tensor(
            padded, dtype=torch.long, device=device
        )  # [B, max_blocks]
        lens = torch.tensor(self.seq_lens, dtype=torch.long, device=device)  # [B]
        key_pos = torch.arange(width * kv.block_size, device=device)  # [L]
        self.decode_mask = (
            key_pos[None, :] < lens[:, None]
        )  # [B, L]: a lone last token sees its whole context
        # [P]: the rows of the flattened [B * L] gather that lie past their request's context,
        # request i's being i * L + seq_len .. (i + 1) * L - 1; built on the host, as the rest
        past = width * kv.block_size - np.array(self.seq_lens)  # [B] rows past each context
        first = np.arange(len(past)) * width * kv.block_size + np.array(self.seq_lens)  # [B]
        hidden = np.repeat(first - (np.cumsum(past) - past), past) + np.arange(past.sum())
        self.decode_hidden = torch.from_numpy(hidden).to(device)  # [P]

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q [N, H, hd], k, v [N, KV, hd]: write the new K/V first (new tokens see themselves),
        then attend."""
        if self.slot_mapping is None:
            raise ValueError(
                "this PagedAttention was built without a slot_mapping, so it cannot store K/V"
            )
        self.kv.store(layer, self.slot_mapping, k, v)
        return (
            self.decode(layer, q, scale) if self.decode_only else self.varlen(layer, q, scale)
        )

    def varlen(self, layer: int, q: torch.Tensor, scale: float) -> torch.Tensor:
        """Any mix of prefills, chunks and decodes: the readable reference, one attention call
        per request.

        Request i's n new tokens are the last n of its context of seq_lens[i], so the causal
        mask is aligned to the end: new token j (at position seq_len - n + j) sees keys
        0..seq_len - n + j.
        """
        out = torch.empty_like(q)  # [N, H, hd]
        k_cache, v_cache = self.kv.k[layer], self.kv.v[layer]
        for i, seq_len in enumerate(self.seq_lens):
            start, end = self.query_start_loc[i], self.query_start_loc[i + 1]
            blocks = self.block_tables[
                i, : self.num_blocks[i]
            ]  # [n_blocks], already on the device
            k = k_cache[blocks].flatten(0, 1)[
                :seq_len
            ]  # [seq_len, KV, hd], gathered from the request's blocks
            v = v_cache[blocks].flatten(0, 1)[:seq_len]
            out[start:end] = causal_attention(q[None, start:end], k[None], v[None], scale)[0]
        return out

    def decode(self, layer: int, q: torch.Tensor, scale: float) -> torch.Tensor:
        """Only decodes (q [B, H, hd], one new token per request): one batched attention call.

        Gather every request's blocks into a padded [B, L, KV, hd] batch and mask the padding.
        """
        B, H, hd = q.shape
        width, KV = self.block_tables.shape[1], self.kv.num_kv_heads
        L, G = width * self.kv.block_size, H // KV
        blocks = self.block_tables.flatten()  # [B * max_blocks]
        # into buffers the cache keeps, so a step maps no fresh memory
        k = self.kv.gather(layer, "k", blocks).view(B, L, KV, hd)
        v = self.kv.gather(layer, "v", blocks).view(B, L, KV, hd)
        # Filler entries read block 0 and a last block's tail is stale: either may hold another
        # request's inf or NaN. The mask gives those keys weight 0, but NaN - inf and 0 x NaN
        # are still NaN, so they are zeroed first.
        k.view(B * L, KV * hd).index_fill_(0, self.decode_hidden, 0.0)
        v.view(B * L, KV * hd).index_fill_(0, self.decode_hidden, 0.0)
        # GQA by a reshape: a KV head's G query heads are its G query rows. k, v are read in
        # place as strided [B, KV, L, hd] views, without a layout copy.
        o = F.scaled_dot_product_attention(
            q.view(B, KV, G, hd),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=self.decode_mask[:, None, None, :],  # [B, 1, 1, L]
            scale=scale,
        )  # [B, KV, G, hd]
        return o.reshape(B, H, hd)


def paged_attention(
    q: torch.Tensor,
    kv: PagedKVCache,
    layer: int,
    block_tables: list[list[int]],
    seq_lens: list[int],
    query_start_loc: list[int],
    scale: float,
) -> torch.Tensor:
    """Attention for a flat batch q [N, H, hd] whose K/V are already in the cache: the reference
    loop."""
    attn = PagedAttention(kv, block_tables, seq_lens, query_start_loc)
    check_queries(q, kv, attn.num_tokens)
    return attn.varlen(check_int("layer", layer, min=0, max=kv.num_layers - 1), q, scale)


def paged_decode_attention(
    q: torch.Tensor,
    kv: PagedKVCache,
    layer: int,
    block_tables: list[list[int]],
    seq_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """The decode case in one attention call: q [B, H, hd] is one new token per request, the
    last of its context."""
    attn = PagedAttention(kv, block_tables, seq_lens, list(range(len(seq_lens) + 1)))
    check_queries(q, kv, attn.num_tokens)
    return attn.decode(check_int("layer", layer, min=0, max=kv.num_layers - 1), q, scale)


# ---- host-side checks: run once per forward, on Python lists, before anything is written
#   ----------------


def check_slots(slot_mapping, num_slots: int) -> list[int]:
    """The slot mapping as a list of ints, each a slot of the pool and none written twice."""
    if isinstance(slot_mapping, torch.Tensor):
        if (
            slot_mapping.dim() != 1
            or slot_mapping.dtype.is_floating_point
            or slot_mapping.dtype == torch.bool
        ):
            raise ValueError(
                f"slot_mapping is a {slot_mapping.dtype} tensor of shape "
                f"{tuple(slot_mapping.shape)}: "
                "expected a 1-D integer tensor, one slot per new token"
            )
        slot_mapping = slot_mapping.tolist()  # host metadata: reading it costs no device sync
    slots = check_int_list("slot_mapping", slot_mapping)
    bad = [s for s in slots if not 0 <= s < num_slots]
    if bad:
        raise ValueError(f"slot {bad[0]} is outside the pool: expected 0 <= slot < {num_slots}")
    if len(set(slots)) != len(slots):
        dup = next(s for s, count in Counter(slots).items() if count > 1)
        raise ValueError(
            f"slot {dup} appears twice in the slot mapping: two new tokens would write the "
            "same place"
        )
    return slots


def check_block_table(name: str, table, num_tokens: int, kv: PagedKVCache) -> list[int]:
    """The blocks that hold num_tokens tokens (a prefix of the table), each a block of the
    cache."""
    if isinstance(table, torch.Tensor):
        table = table.tolist()
    table = check_int_list(name, table)
    need = num_blocks_for(num_tokens, kv.block_size)
    if need > len(table):
        raise ValueError(
            f"{name} has {len(table)} blocks, but {num_tokens} tokens need {need} "
            f"(block_size {kv.block_size})"
        )
    bad = [b for b in table[:need] if not 0 <= b < kv.num_blocks]
    if bad:
        raise ValueError(f"{name} holds block {bad[0]}: expected 0 <= block < {kv.num_blocks}")
    return table[:need]


def check_paged_metadata(kv: PagedKVCache, block_tables, seq_lens, query_start_loc):
    """Every way the metadata can disagree with itself or with the cache, named before anything
    runs."""
    seq_lens = check_int_list("seq_lens", seq_lens, min=1)
    qsl = check_int_list("query_start_loc", query_start_loc, min=0)
    B = len(seq_lens)
    if B == 0 or len(block_tables) != B or len(qsl) != B + 1:
        raise ValueError(
            f"{B} seq_lens, {len(block_tables)} block tables and {len(qsl)} query_start_loc "
            f"entries: expected B >= 1 requests, B tables and B + 1 offsets"
        )
    if qsl[0] != 0:
        raise ValueError(f"query_start_loc starts at {qsl[0]}: expected 0")
    tables = []
    for i in range(B):
        n = qsl[i + 1] - qsl[i]
        if not 1 <= n <= seq_lens[i]:
            raise ValueError(
                f"request {i} has {n} new tokens (query_start_loc {qsl[i]}..{qsl[i + 1]}) and "
                "a "
                f"context of {seq_lens[i]}: expected 1 <= new tokens <= context"
            )
        tables.append(
            check_block_table(f"request {i}'s block table", block_tables[i], seq_lens[i], kv)
        )
    return seq_lens, qsl, tables


def check_queries(q: torch.Tensor, kv: PagedKVCache, num_tokens: int) -> None:
    if q.dim() != 3 or q.shape[0] != num_tokens:
        raise ValueError(
            f"q has shape {tuple(q.shape)}: expected [{num_tokens}, heads, head_dim], "
            "one row per new token of query_start_loc"
        )
    if q.shape[1] % kv.num_kv_heads or q.shape[2] != kv.head_dim:
        raise ValueError(
            f"q has {q.shape[1]} heads of dim {q.shape[2]}: expected a multiple of "
            f"{kv.num_kv_heads} KV heads, of dim {kv.head_dim}"
        )
