"""Partial RoPE: rotate only the first rotary_dim = int(head_dim * partial_rotary_factor)
features of each head, pairs (i, i + rotary_dim/2); the rest pass through unchanged."""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, partial_rotary_factor: float, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T] -> (cos, sin), each [T, rotary_dim] float32, where rotary_dim =
    int(head_dim * partial_rotary_factor) must be even and from 2 to head_dim."""
    raise NotImplementedError("rope_cos_sin")


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x[..., :rotary_dim] of x [..., T, heads, head_dim] (rotary_dim = cos.shape[-1]);
    cos and sin broadcast against that part ([T, 1, rotary_dim]); x[..., rotary_dim:] passes
    through."""
    raise NotImplementedError("apply_rope")
