"""Wrong: x / (sqrt(mean(x^2)) + eps) instead of x / sqrt(mean(x^2) + eps).

Caught by: test_matches_minillm_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 / (x32.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)).to(x.dtype)
