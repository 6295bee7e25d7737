"""Wrong: uses the ordinary causal mask (tril()), right for a prefill only: a decode then sees
one key.

Caught by: test_decode_sees_the_whole_history.
"""

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
    block_size, heads, kv_heads = k_cache.shape[1], q.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    for table, seq_len, start, end in zip(
        block_tables, seq_lens, query_start_loc, query_start_loc[1:]
    ):
        used = table[: (seq_len + block_size - 1) // block_size]
        k = k_cache[used].flatten(0, 1)[
            :seq_len
        ]  # [S, KV, hd] in position order; stale slots cut off
        v = v_cache[used].flatten(0, 1)[:seq_len]
        k = k.repeat_interleave(heads // kv_heads, dim=1)  # [S, H, hd]
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        n = end - start
        scores = (
            torch.einsum("nhd,shd->hns", q[start:end].float(), k.float()) * scale
        )  # [H, n, S]
        sees = torch.ones(n, seq_len, dtype=torch.bool, device=q.device).tril()
        weights = scores.masked_fill(~sees, float("-inf")).softmax(dim=-1)
        out[start:end] = torch.einsum("hns,shd->nhd", weights, v.float()).to(q.dtype)
    return out
