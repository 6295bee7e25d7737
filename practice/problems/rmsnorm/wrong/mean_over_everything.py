"""Wrong: one RMS for the whole tensor instead of one per vector.

Caught by: test_fused_matches_float64_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean() + eps)).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x.float() + residual.float()
    inv_rms = torch.rsqrt(summed.pow(2).mean() + eps)
    return weight * (summed * inv_rms).to(x.dtype), summed.to(x.dtype)
