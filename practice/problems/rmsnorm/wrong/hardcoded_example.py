"""Wrong: fits the problem's example only (two features, the example's eps values).

Caught by: test_matches_minillm_for_any_shape_and_eps.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    a, b = x[..., :1], x[..., 1:2]
    rms = torch.sqrt((a * a + b * b) / 2 + eps)
    return weight * (x / rms)
