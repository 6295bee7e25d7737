"""RMSNorm fused with the residual add, as vLLM's RMSNorm.forward_native(x, residual) computes
it: new_residual = x + residual, normed = rms_norm(new_residual) * weight."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> x / sqrt(mean(x^2) + eps) * weight, [..., d] in x's dtype.
    The first layer's norm, which has no residual to add yet."""
    x32 = x.float()  # fp16 squares overflow past 255; bf16 means lose digits
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)  # [..., 1]
    return weight * (x32 * inv_rms).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual [..., d], weight [d] -> (normed, new_residual), both [..., d] in x's dtype.

    new_residual = x + residual; normed = rms_norm(x + residual) * weight, where the norm reads
    the float32 sum itself, not the sum after rounding to x's dtype."""
    summed = x.float() + residual.float()  # stays float32 until both results are rounded
    inv_rms = torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps)  # [..., 1]
    return weight * (summed * inv_rms).to(x.dtype), summed.to(x.dtype)
