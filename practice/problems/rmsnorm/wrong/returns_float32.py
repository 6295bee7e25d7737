"""Wrong: forgets to cast back, so half-precision inputs come back as float32.

Caught by: test_half_precision_input_does_not_overflow.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return weight.float() * (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps))
