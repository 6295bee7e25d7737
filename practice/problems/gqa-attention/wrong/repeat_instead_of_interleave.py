"""Wrong: k.repeat(1, group, 1) lays out all the KV heads again and again: query head 1 reads
KV head 1, not 0.

Caught by: test_query_heads_share_kv_heads_in_consecutive_groups.
"""

import torch


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None
) -> torch.Tensor:
    """q [T, H, hd], k and v [T, KV, hd] -> [T, H, hd]; query i sees keys j <= i with
    i - j < window (every j <= i when window is None)."""
    T, H, hd = q.shape
    group = H // k.shape[1]  # query heads per KV head
    k, v = k.repeat(1, group, 1), v.repeat(1, group, 1)  # [T, H, hd]
    scores = torch.einsum("ihd,jhd->hij", q, k) * hd**-0.5  # [H, query i, key j]
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(T, device=q.device)[None, :]
    visible = j <= i  # causal
    if window is not None:
        visible = visible & (i - j < window)  # the last `window` positions, i itself included
    weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
    return torch.einsum("hij,jhd->ihd", weights, v)
