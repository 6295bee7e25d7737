"""Wrong: uses the window's test (j > i - window) in place of the causal mask instead of on top
of it: the keys after the query leak in.

Caught by: test_future_keys_do_not_change_the_past.
"""

import torch


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None
) -> torch.Tensor:
    """q [T, H, hd], k and v [T, KV, hd] -> [T, H, hd]; query i sees keys j <= i with
    i - j < window (every j <= i when window is None)."""
    T, H, hd = q.shape
    group = H // k.shape[1]  # query heads per KV head
    kv_of_head = torch.arange(H, device=q.device) // group  # query head h reads this KV head
    k, v = k[:, kv_of_head], v[:, kv_of_head]  # [T, H, hd]: each KV head once per query head
    scores = torch.einsum("ihd,jhd->hij", q, k) * hd**-0.5  # [H, query i, key j]
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(T, device=q.device)[None, :]
    visible = j <= i  # causal
    if window is not None:
        visible = j > i - window  # the last `window` positions
    weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
    return torch.einsum("hij,jhd->ihd", weights, v)
