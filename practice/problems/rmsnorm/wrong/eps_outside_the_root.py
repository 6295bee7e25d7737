"""Wrong: s / (sqrt(mean(s^2)) + eps) instead of s / sqrt(mean(s^2) + eps).

Caught by: test_fused_matches_float64_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 / (x32.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x.float() + residual.float()
    rms = summed.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return weight * (summed / (rms + eps)).to(x.dtype), summed.to(x.dtype)
