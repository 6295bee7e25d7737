"""Wrong: scales by (1 + weight), as Gemma does, instead of by weight.

Caught by: test_matches_minillm_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return (1 + weight) * (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)).to(
        x.dtype
    )
