"""Wrong: adds in x's dtype and normalises that rounded sum, not the float32 sum.

That is what chapter 1's unfused layer and vLLM's CUDA kernel do, but not forward_native: in
half precision, many outputs are off in the last place.

Caught by: test_half_precision_normalises_the_float32_sum_rounded_once.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * (x32 * inv_rms).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    new_residual = x + residual
    return rms_norm(new_residual, weight, eps), new_residual
