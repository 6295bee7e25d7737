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

from minillm.model import Transformer, apply_rope, rope_cos_sin
from minillm.paged import PagedKVCache, paged_attention, slot_mapping_for


@dataclass
class BatchInput:
    input_ids: torch.Tensor  # [N] every request's new tokens, back to back
    positions: torch.Tensor  # [N] each token's position in its own sequence
    slot_mapping: torch.Tensor  # [N] where each token's K/V are written (block * block_size + offset)
    query_start_loc: list[int]  # [B+1] request i owns tokens query_start_loc[i] : query_start_loc[i+1]
    seq_lens: list[int]  # [B] each request's context length once this step is done
    block_tables: list[list[int]]  # [B] each request's blocks, in position order
    logits_indices: torch.Tensor  # [M] rows of N whose logits we need (a request's last token)


def build_batch(items, block_size: int, device="cpu", vocab_size: int | None = None) -> BatchInput:
    """items: (token_ids, num_computed, block_table, need_logits) per request; token_ids are the new tokens.

    Checks everything before building anything, and names the request and value at fault.
    """
    items = list(items)
    if not items:
        raise ValueError("build_batch got no items: expected at least one (token_ids, num_computed, block_table, need_logits)")
    input_ids, positions, slots, query_start_loc, seq_lens, tables, logits_idx = [], [], [], [0], [], [], []
    for r, (token_ids, num_computed, table, need_logits) in enumerate(items):
        token_ids = list(token_ids)
        if not token_ids:
            raise ValueError(f"request {r} has an empty token list: expected at least one new token")
        if num_computed < 0:
            raise ValueError(f"request {r} has num_computed={num_computed}: expected >= 0")
        if vocab_size is not None:
            bad = [t for t in token_ids if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"request {r} has token id {bad[0]} outside the vocabulary: expected 0 <= id < {vocab_size}")
        pos = list(range(num_computed, num_computed + len(token_ids)))
        try:
            slots += slot_mapping_for(table, pos, block_size)
        except ValueError as e:
            raise ValueError(f"request {r}: {e}") from None
        input_ids += token_ids
        positions += pos
        query_start_loc.append(query_start_loc[-1] + len(token_ids))
        seq_lens.append(num_computed + len(token_ids))
        tables.append(list(table))
        if need_logits:
            logits_idx.append(query_start_loc[-1] - 1)  # the request's last new token
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)  # noqa: E731
    return BatchInput(as_tensor(input_ids), as_tensor(positions), as_tensor(slots), query_start_loc,
                      seq_lens, tables, as_tensor(logits_idx))


class ModelRunner:
    """Runs a `Transformer`'s own weights (no copy) over a flat batch, with K/V in a `PagedKVCache`."""

    def __init__(self, model: Transformer, kv: PagedKVCache):
        cfg = model.cfg
        if (kv.num_kv_heads, kv.head_dim, len(kv.k)) != (cfg.num_key_value_heads, cfg.hd, cfg.num_hidden_layers):
            raise ValueError(
                f"cache is {len(kv.k)} layers x {kv.num_kv_heads} KV heads x {kv.head_dim}, model needs "
                f"{cfg.num_hidden_layers} x {cfg.num_key_value_heads} x {cfg.hd}"
            )
        self.model, self.kv = model, kv
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hd
        self.scale = 1 / math.sqrt(cfg.hd)

    @torch.no_grad()
    def forward(self, batch: BatchInput) -> torch.Tensor:
        """Logits [M, vocab] for the tokens at batch.logits_indices; K/V of all N tokens are cached."""
        m, N = self.model, batch.input_ids.shape[0]
        m.check_token_ids(batch.input_ids)
        x = m.embed_tokens(batch.input_ids)  # [N, d]
        cos, sin = rope_cos_sin(batch.positions, self.hd, m.cfg.rope_theta)  # [N, hd]
        cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)  # broadcast over heads
        for i, layer in enumerate(m.layers):
            attn, h = layer.self_attn, layer.input_layernorm(x)
            q = apply_rope(attn.q_norm(attn.q_proj(h).view(N, self.nh, self.hd)), cos, sin)  # [N, H, hd]
            k = apply_rope(attn.k_norm(attn.k_proj(h).view(N, self.nkv, self.hd)), cos, sin)  # [N, KV, hd]
            v = attn.v_proj(h).view(N, self.nkv, self.hd)
            self.kv.write(i, batch.slot_mapping, k, v)  # write first, so the new tokens see themselves
            o = paged_attention(q, self.kv, i, batch.block_tables, batch.seq_lens, batch.query_start_loc, self.scale)
            x = x + attn.o_proj(o.reshape(N, self.nh * self.hd))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return m.lm_head(m.norm(x[batch.logits_indices]))  # the output layer only where we sample
