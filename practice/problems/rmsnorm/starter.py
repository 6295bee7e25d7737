"""RMSNorm fused with the residual add, as vLLM's RMSNorm.forward_native(x, residual) computes
it: new_residual = x + residual, normed = rms_norm(new_residual) * weight."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> x / sqrt(mean(x^2) + eps) * weight, [..., d] in x's dtype.
    The first layer's norm, which has no residual to add yet."""
    raise NotImplementedError("rms_norm")


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual [..., d], weight [d] -> (normed, new_residual), both [..., d] in x's dtype.

    new_residual = x + residual; normed = rms_norm(x + residual) * weight, where the norm reads
    the float32 sum itself, not the sum after rounding to x's dtype."""
    raise NotImplementedError("fused_add_rms_norm")
