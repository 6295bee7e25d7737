"""Wrong: averages over dim=1 (right for [N, d] inputs only, wrong for [B, T, d] and [d]).

Caught by: test_matches_minillm_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    dim = 1 if x.dim() > 1 else 0
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(dim=dim, keepdim=True) + eps)).to(
        x.dtype
    )
