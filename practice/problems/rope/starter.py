"""RoPE: rotate each (i, i + head_dim/2) pair of a head by position * theta^(-2i/head_dim)."""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T] -> (cos, sin), each [T, head_dim] float32: each pair's angle, written for
    both halves."""
    raise NotImplementedError("rope_cos_sin")


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., T, heads, head_dim]; cos and sin broadcast against it ([T, 1,
    head_dim])."""
    raise NotImplementedError("apply_rope")
