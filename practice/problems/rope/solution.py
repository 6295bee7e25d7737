"""RoPE: rotate each (i, i + head_dim/2) pair of a head by position * theta^(-2i/head_dim)."""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T] -> (cos, sin), each [T, head_dim] float32: each pair's angle, written for
    both halves."""
    pair = torch.arange(head_dim // 2, dtype=torch.float32, device=positions.device)  # [hd/2]
    speed = theta ** (-2.0 * pair / head_dim)  # radians per position, fastest pair first
    angle = positions.to(torch.float32)[:, None] * speed[None, :]  # [T, hd/2]
    angle = torch.cat(
        [angle, angle], dim=-1
    )  # [T, hd]: first half and second half share the angle
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., T, heads, head_dim]; cos and sin broadcast against it ([T, 1,
    head_dim])."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    partner = torch.cat(
        [-second, first], dim=-1
    )  # what each element's partner contributes through sin
    return (x * cos + partner * sin).to(x.dtype)
