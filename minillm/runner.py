"""runner.py — varlen batching: many requests' new tokens in one flat forward.

Every request in a step, whatever its phase, is "n new tokens after k cached ones": a full prefill is
k = 0, a decode is n = 1, a middle chunk of a long prompt has both non-zero. We lay all new tokens
end to end ([N] instead of a padded [B, max_len]) and describe the layout with a few metadata arrays.
Only attention needs them; every other layer works token by token on the [N, hidden] matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minillm.checking import as_int
from minillm.model import Transformer, apply_rope, rope_cos_sin
from minillm.paged import PagedKVCache, paged_attention, paged_decode_attention, slot_mapping_for


@dataclass
class BatchInput:
    input_ids: torch.Tensor  # [N] every request's new tokens, back to back
    positions: torch.Tensor  # [N] each token's position in its own sequence
    slot_mapping: torch.Tensor  # [N] where each token's K/V are written (block * block_size + offset)
    query_start_loc: list[int]  # [B+1] request i owns tokens query_start_loc[i] : query_start_loc[i+1]
    seq_lens: list[int]  # [B] each request's context length once this step is done
    block_tables: list[list[int]]  # [B] each request's blocks, in position order
    logits_indices: torch.Tensor  # [M] rows of N whose logits we need (a request's last token)

    @property
    def num_tokens(self) -> int:  # N
        return self.query_start_loc[-1]

    @property
    def num_reqs(self) -> int:  # B
        return len(self.seq_lens)


ITEM = "(token_ids, num_computed, block_table, need_logits)"  # what build_batch takes per request


def _check_item(r: int, item, block_size: int, vocab_size: int | None) -> tuple[list[int], int, list[int], bool]:
    """One request's (token_ids, num_computed, block_table, need_logits), checked; names request r on error."""
    try:
        token_ids, num_computed, table, need_logits = item
    except (TypeError, ValueError):
        raise ValueError(f"request {r} is {item!r}: expected {ITEM}") from None
    try:
        ids, blocks = [as_int(t) for t in token_ids], [as_int(b) for b in table]
    except TypeError:
        raise ValueError(f"request {r} is {item!r}: token_ids and block_table must be lists of ints") from None
    if not ids:
        raise ValueError(f"request {r} has an empty token list: expected at least one new token")
    if None in ids:
        raise ValueError(f"request {r} has token {list(token_ids)[ids.index(None)]!r}: expected integer token ids")
    if vocab_size is not None:
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"request {r} has token id {bad[0]} outside the vocabulary: expected 0 <= id < {vocab_size}")
    k = as_int(num_computed)
    if k is None or k < 0:
        raise ValueError(f"request {r} has num_computed={num_computed!r}: expected an int >= 0")
    if any(b is None or b < 0 for b in blocks):
        bad = next(b for b, c in zip(table, blocks) if c is None or c < 0)
        raise ValueError(f"request {r} has block id {bad!r} in its block table: expected ints >= 0")
    last = k + len(ids) - 1  # the furthest position this step writes
    if last // block_size >= len(blocks):
        raise ValueError(f"request {r}: position {last} needs block {last // block_size}, but the block table has "
                         f"{len(blocks)} blocks (block_size {block_size})")
    return ids, k, blocks, bool(need_logits)


def build_batch(items, block_size: int, device="cpu", vocab_size: int | None = None) -> BatchInput:
    """items: (token_ids, num_computed, block_table, need_logits) per request; token_ids are the new tokens.

    Every item is checked before anything is built, and an error names the request and the value at fault.
    Pass vocab_size to reject token ids the model has no embedding for.
    """
    items = list(items)
    if not items:
        raise ValueError(f"build_batch got no items: expected at least one {ITEM}")
    if as_int(block_size) is None or block_size < 1:
        raise ValueError(f"block_size is {block_size!r}: expected an int >= 1")
    checked = [_check_item(r, item, block_size, vocab_size) for r, item in enumerate(items)]

    input_ids, positions, slots, query_start_loc, seq_lens, tables, logits_idx = [], [], [], [0], [], [], []
    for token_ids, num_computed, table, need_logits in checked:
        pos = list(range(num_computed, num_computed + len(token_ids)))
        input_ids += token_ids
        positions += pos
        slots += slot_mapping_for(table, pos, block_size)
        query_start_loc.append(query_start_loc[-1] + len(token_ids))
        seq_lens.append(num_computed + len(token_ids))  # cached + new: the context attention reads
        tables.append(table)
        if need_logits:
            logits_idx.append(query_start_loc[-1] - 1)  # the request's last new token
    # Built on the CPU, then moved in one copy per array: the index tensors must live where the model does.
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.long).to(device)  # noqa: E731
    return BatchInput(as_tensor(input_ids), as_tensor(positions), as_tensor(slots), query_start_loc,
                      seq_lens, tables, as_tensor(logits_idx))


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [N, in] @ weight.T -> [N, out]: every projection of the flat batch goes through here.

    On CPU, MKL's float32 GEMM is slow for a few rows: 2 to 4 rows cost about twice one row (the
    weight is repacked on every call), so 2 decodes in one forward would take as long as 2 forwards.
    Computing weight @ x.T instead streams the weight once; same product, up to float rounding.
    From 9 rows on, and on GPUs, the plain call is the fast one.
    """
    if x.device.type == "cpu" and 2 <= x.shape[0] <= 8:
        return (weight @ x.T).T.contiguous()
    return F.linear(x, weight)


class ModelRunner:
    """Runs a `Transformer`'s own weights (no copy) over a flat batch, with K/V in a `PagedKVCache`.

    The model and the cache must share a device and a dtype; build batches with `device=runner.device`.
    """

    def __init__(self, model: Transformer, kv: PagedKVCache):
        cfg = model.cfg
        if (kv.num_kv_heads, kv.head_dim, len(kv.k)) != (cfg.num_key_value_heads, cfg.hd, cfg.num_hidden_layers):
            raise ValueError(
                f"cache is {len(kv.k)} layers x {kv.num_kv_heads} KV heads x {kv.head_dim}, model needs "
                f"{cfg.num_hidden_layers} x {cfg.num_key_value_heads} x {cfg.hd}"
            )
        w = model.embed_tokens.weight
        if (kv.k[0].dtype, kv.k[0].device) != (w.dtype, w.device):
            raise ValueError(f"cache holds {kv.k[0].dtype} on {kv.k[0].device}, model runs {w.dtype} on {w.device}: "
                             "create the PagedKVCache with the model's dtype and device")
        self.model, self.kv = model, kv
        self.device = w.device
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hd
        self.scale = 1 / math.sqrt(cfg.hd)

    def check_batch(self, batch: BatchInput) -> None:
        """Everything forward needs, checked before the first K/V write, so a bad batch leaves the cache as it was."""
        if batch.input_ids.device != self.device:
            raise ValueError(f"batch tensors are on {batch.input_ids.device}, the model is on {self.device}: "
                             f"build_batch(..., device={str(self.device)!r})")
        for r, table in enumerate(batch.block_tables):
            bad = [b for b in table if not 0 <= b < self.kv.num_blocks]
            if bad:
                raise ValueError(f"request {r} uses block {bad[0]}, but the cache has blocks 0..{self.kv.num_blocks - 1}")
        self.model.check_token_ids(batch.input_ids)

    @torch.no_grad()
    def forward(self, batch: BatchInput) -> torch.Tensor:
        """Logits [M, vocab] for the tokens at batch.logits_indices; K/V of all N tokens are cached."""
        self.check_batch(batch)
        m, N = self.model, batch.input_ids.shape[0]
        x = m.embed_tokens(batch.input_ids)  # [N, d]
        cos, sin = rope_cos_sin(batch.positions, self.hd, m.cfg.rope_theta)  # [N, hd], float32 on the batch's device
        cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)  # [N, 1, hd]: broadcast over heads
        for i, layer in enumerate(m.layers):
            attn, h = layer.self_attn, layer.input_layernorm(x)
            q = apply_rope(attn.q_norm(linear(h, attn.q_proj.weight).view(N, self.nh, self.hd)), cos, sin)  # [N, H, hd]
            k = apply_rope(attn.k_norm(linear(h, attn.k_proj.weight).view(N, self.nkv, self.hd)), cos, sin)  # [N, KV, hd]
            v = linear(h, attn.v_proj.weight).view(N, self.nkv, self.hd)  # [N, KV, hd]
            self.kv.write(i, batch.slot_mapping, k, v)  # write first, so the new tokens see themselves
            if N == len(batch.seq_lens):  # a pure decode step: one new token each, one batched attention call
                o = paged_decode_attention(q, self.kv, i, batch.block_tables, batch.seq_lens, self.scale)
            else:
                o = paged_attention(q, self.kv, i, batch.block_tables, batch.seq_lens, batch.query_start_loc, self.scale)
            x = x + linear(o.reshape(N, self.nh * self.hd), attn.o_proj.weight)  # [N, d]
            h, mlp = layer.post_attention_layernorm(x), layer.mlp
            x = x + linear(F.silu(linear(h, mlp.gate_proj.weight)) * linear(h, mlp.up_proj.weight), mlp.down_proj.weight)
        return linear(m.norm(x[batch.logits_indices]), m.lm_head.weight)  # [M, V]: the output layer only where we sample
