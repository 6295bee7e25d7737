"""Wrong: copies Hugging Face's arange(0, rotary_dim, 2) / rotary_dim without the check: an
odd rotary_dim (74 * 0.5 = 37) silently gives a table one column wider, frequencies over 37.

Caught by: test_a_rotary_dim_odd_or_outside_the_head_raises_value_error_naming_it.
"""

import torch


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, partial_rotary_factor: float, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    rotary_dim = int(head_dim * partial_rotary_factor)
    speed = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    angle = positions.float()[:, None] * speed[None, :]
    angle = torch.cat([angle, angle], dim=-1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    partner = torch.cat([-rot[..., r // 2 :], rot[..., : r // 2]], dim=-1)
    return torch.cat([(rot * cos + partner * sin).to(x.dtype), rest], dim=-1)
