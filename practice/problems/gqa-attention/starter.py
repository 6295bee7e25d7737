"""One Qwen3 attention block: projections, QK-norm, RoPE, grouped-query causal attention, output
projection."""

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
    raise NotImplementedError("attention_forward")
