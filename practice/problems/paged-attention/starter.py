"""Attention for a flat batch of requests whose K/V live in a paged cache, in one padded,
batched call: any mix of prefills, chunks and decodes (end-aligned causal mask, GQA)."""

import torch


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: list[list[int]],
    seq_lens: list[int],
    query_start_loc: list[int],
    scale: float,
) -> torch.Tensor:
    """q [N, H, hd]; k_cache, v_cache [num_blocks, block_size, KV, hd] -> [N, H, hd]."""
    raise NotImplementedError("paged_attention")
