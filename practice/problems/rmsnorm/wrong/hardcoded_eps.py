"""Wrong: always uses Qwen3's eps of 1e-6, whatever eps the caller passes.

Caught by: test_matches_minillm_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + 1e-6)).to(
        x.dtype
    )
