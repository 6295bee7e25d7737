"""Wrong: fits the example only: head_dim 4 and theta 100 (pair speeds 1 and 0.1).

Caught by: test_tables_for_any_positions_head_dim_and_theta.
"""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    speed = torch.tensor([1.0, 0.1] * (head_dim // 4) + [1.0] * (head_dim // 2 % 2))
    angle = positions.to(torch.float32)[:, None] * speed[None, : head_dim // 2]
    angle = torch.cat([angle, angle], dim=-1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    partner = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + partner * sin).to(x.dtype)
