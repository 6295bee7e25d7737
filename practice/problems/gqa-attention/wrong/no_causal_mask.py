"""Wrong: lets every token see the whole sequence, future included.

Caught by: test_matches_the_reference_for_any_grouping.
"""

import torch

from minillm.model import apply_rope  # noqa: F401  (you will need it)


def attention_forward(
    attn,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
) -> torch.Tensor:
    """x [B, T, hidden] -> [B, T, hidden]; attn is a minillm.model.Attention, cos/sin are [T, 1,
    head_dim]."""
    B, T, _ = x.shape
    q = attn.q_proj(x).view(B, T, num_heads, -1)  # [B, T, H, hd]
    head_dim = q.shape[-1]
    k = attn.k_proj(x).view(B, T, num_kv_heads, head_dim)  # [B, T, KV, hd]
    v = attn.v_proj(x).view(B, T, num_kv_heads, head_dim)
    q = apply_rope(attn.q_norm(q), cos, sin)  # each head normalised, then rotated
    k = apply_rope(attn.k_norm(k), cos, sin)
    group = num_heads // num_kv_heads
    k = k.repeat_interleave(
        group, dim=2
    )  # KV head j serves query heads j*group .. j*group + group-1
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
    scores = q @ k.transpose(-1, -2) / head_dim**0.5  # [B, H, T, T]
    future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
    weights = scores.softmax(dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(B, T, num_heads * head_dim)  # [B, T, H*hd]
    return attn.o_proj(out)
