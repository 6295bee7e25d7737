"""Wrong: returns the float32 sum as new_residual without casting it back to x's dtype.

Caught by: test_new_residual_is_x_plus_residual.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * (x32 * inv_rms).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x.float() + residual.float()
    inv_rms = torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * (summed * inv_rms).to(x.dtype), summed
