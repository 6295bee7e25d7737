"""Wrong: multiplies by the weight before casting back, so half-precision results are rounded
differently.

Caught by: test_half_precision_is_computed_in_float32_and_rounded_once.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return (weight.float() * x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)).to(
        x.dtype
    )
