"""Wrong: rotates element i with its neighbour i + 1 (GPT-J's interleaved pairs) instead of
with i + rotary_dim/2.

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
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    even, odd = rot[..., 0::2], rot[..., 1::2]
    partner = torch.stack([-odd, even], dim=-1).flatten(-2)
    return torch.cat([(rot * cos + partner * sin).to(x.dtype), rest], dim=-1)
