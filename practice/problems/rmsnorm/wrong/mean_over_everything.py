"""Wrong: one RMS for the whole tensor instead of one per vector.

Caught by: test_matches_minillm_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean() + eps)).to(x.dtype)
