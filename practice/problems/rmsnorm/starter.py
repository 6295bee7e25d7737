"""RMSNorm: x / sqrt(mean(x^2) + eps) * weight, over the last dimension."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> [..., d] in x's dtype; the statistics are computed in
    float32."""
    raise NotImplementedError("rms_norm")
