"""RMSNorm: x / sqrt(mean(x^2) + eps) * weight, over the last dimension."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> [..., d] in x's dtype; the statistics are computed in
    float32."""
    x32 = x.float()  # fp16 squares overflow past 255; bf16 means lose digits
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)  # [..., 1]
    return weight * (x32 * inv_rms).to(x.dtype)
