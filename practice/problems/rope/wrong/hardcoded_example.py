"""Wrong: fits the example only: head_dim 8, factor 0.5 and theta 100 (pair speeds 1 and 0.1).

Caught by: test_tables_for_any_positions_head_dim_factor_and_theta.
"""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, partial_rotary_factor: float, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    rotary_dim = int(head_dim * partial_rotary_factor)
    if rotary_dim % 2 or not 2 <= rotary_dim <= head_dim:
        raise ValueError(f"rotary_dim {rotary_dim} must be even, from 2 to {head_dim}")
    speed = torch.tensor([1.0, 0.1] * rotary_dim)[: rotary_dim // 2]
    angle = positions.float()[:, None] * speed[None, :]
    angle = torch.cat([angle, angle], dim=-1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    partner = torch.cat([-rot[..., r // 2 :], rot[..., : r // 2]], dim=-1)
    return torch.cat([(rot * cos + partner * sin).to(x.dtype), rest], dim=-1)
