"""Wrong: returns float64 tables; the task asks for float32.

Caught by: test_tables_for_any_positions_head_dim_factor_and_theta.
"""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, partial_rotary_factor: float, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    rotary_dim = int(head_dim * partial_rotary_factor)
    if rotary_dim % 2 or not 2 <= rotary_dim <= head_dim:
        raise ValueError(f"rotary_dim {rotary_dim} must be even, from 2 to {head_dim}")
    pair = torch.arange(rotary_dim // 2, dtype=torch.float64)
    angle = positions.double()[:, None] * (theta ** (-2.0 * pair / rotary_dim))[None, :]
    angle = torch.cat([angle, angle], dim=-1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    partner = torch.cat([-rot[..., r // 2 :], rot[..., : r // 2]], dim=-1)
    return torch.cat([(rot * cos + partner * sin).to(x.dtype), rest], dim=-1)
