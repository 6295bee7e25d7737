"""Rejection sampling of proposed tokens: accept with min(1, p/q), replace the first rejection
from the residual."""

import torch


def rejection_sample(
    p: torch.Tensor, q: torch.Tensor, draft: list[int], seed: int
) -> list[int]:
    """Tokens to emit: the accepted proposals, then a residual draw (at a rejection) or a bonus
    draw from p[k]."""
    raise NotImplementedError("rejection_sample")
