"""Partial RoPE: rotate only the first rotary_dim = int(head_dim * partial_rotary_factor)
features of each head, pairs (i, i + rotary_dim/2); the rest pass through unchanged."""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, partial_rotary_factor: float, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T] -> (cos, sin), each [T, rotary_dim] float32, where rotary_dim =
    int(head_dim * partial_rotary_factor) must be even and from 2 to head_dim."""
    rotary_dim = int(head_dim * partial_rotary_factor)  # truncated, as Hugging Face does
    if rotary_dim % 2 or not 2 <= rotary_dim <= head_dim:
        raise ValueError(
            f"rotary_dim = int({head_dim} * {partial_rotary_factor}) = {rotary_dim}: it must "
            f"be an even number from 2 to head_dim {head_dim}, so that its features form pairs"
        )
    pair = torch.arange(rotary_dim // 2, dtype=torch.float32, device=positions.device)
    speed = theta ** (-2.0 * pair / rotary_dim)  # over the rotated width, not the head
    angle = positions.to(torch.float32)[:, None] * speed[None, :]  # [T, rotary_dim/2]
    angle = torch.cat([angle, angle], dim=-1)  # [T, rotary_dim]: both halves of the part
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x[..., :rotary_dim] of x [..., T, heads, head_dim] (rotary_dim = cos.shape[-1]);
    cos and sin broadcast against that part ([T, 1, rotary_dim]); x[..., rotary_dim:] passes
    through."""
    rotary_dim = cos.shape[-1]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    half = rotary_dim // 2
    partner = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    turned = (rot * cos + partner * sin).to(x.dtype)
    return torch.cat([turned, rest], dim=-1)
