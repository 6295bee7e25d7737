"""Wrong: squares and averages in x's own dtype (no float32 upcast).

Caught by: test_half_precision_input_does_not_overflow.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps))
