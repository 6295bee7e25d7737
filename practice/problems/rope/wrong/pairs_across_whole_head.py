"""Wrong: pads cos with 1 and sin with 0 to the whole head, then rotates the whole head
half against half, so feature i pairs with i + head_dim/2 (in the pass-through part) instead of
i + rotary_dim/2.

Caught by: test_pairs_are_the_two_halves_of_the_rotated_part.
"""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, partial_rotary_factor: float, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    rotary_dim = int(head_dim * partial_rotary_factor)
    if rotary_dim % 2 or not 2 <= rotary_dim <= head_dim:
        raise ValueError(f"rotary_dim {rotary_dim} must be even, from 2 to {head_dim}")
    pair = torch.arange(rotary_dim // 2, dtype=torch.float32)
    angle = positions.float()[:, None] * (theta ** (-2.0 * pair / rotary_dim))[None, :]
    angle = torch.cat([angle, angle], dim=-1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    d, r = x.shape[-1], cos.shape[-1]
    pad = list(cos.shape[:-1]) + [d - r]
    cos = torch.cat([cos, torch.ones(pad)], dim=-1)
    sin = torch.cat([sin, torch.zeros(pad)], dim=-1)
    partner = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return (x * cos + partner * sin).to(x.dtype)
