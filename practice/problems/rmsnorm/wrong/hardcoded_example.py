"""Wrong: fits the problem's example only (two features, the example's sums).

Caught by: test_fused_matches_float64_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    a, b = x[..., :1], x[..., 1:2]
    return weight * (x / torch.sqrt((a * a + b * b) / 2 + eps))


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    s = x + residual
    a, b = s[..., :1], s[..., 1:2]
    return weight * (s / torch.sqrt((a * a + b * b) / 2 + eps)), s
