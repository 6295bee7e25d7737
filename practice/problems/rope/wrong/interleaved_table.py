"""Wrong: writes each angle twice side by side (GPT-J layout) instead of once per half.

Caught by: test_tables_for_any_positions_head_dim_and_theta.
"""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    pair = torch.arange(head_dim // 2, dtype=torch.float32)
    angle = positions.to(torch.float32)[:, None] * (theta ** (-2.0 * pair / head_dim))[None, :]
    angle = angle.repeat_interleave(2, dim=-1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    partner = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + partner * sin).to(x.dtype)
