"""Rejection sampling of proposed tokens: accept with min(1, p/q), replace the first rejection
from the residual."""

import torch


def rejection_sample(
    p: torch.Tensor, q: torch.Tensor, draft: list[int], seed: int
) -> list[int]:
    """Tokens to emit: the accepted proposals, then a residual draw (at a rejection) or a bonus
    draw from p[k]."""
    k = len(draft)
    if (
        p.dim() != 2
        or q.dim() != 2
        or p.shape[0] != k + 1
        or q.shape[0] != k
        or q.shape[1] != p.shape[1]
    ):
        raise ValueError(
            f"p has shape {tuple(p.shape)} and q {tuple(q.shape)} for {k} proposals: "
            f"expected [{k + 1}, V] and [{k}, V]"
        )
    gen = torch.Generator().manual_seed(seed)
    out = []
    for j, x in enumerate(draft):
        u = torch.rand((), generator=gen, dtype=torch.float64)
        if u * q[j, x] < p[j, x]:
            out.append(int(x))
            continue
        residual = (p[j] - q[j]).clamp(min=0)
        out.append(int(torch.multinomial(residual, 1, generator=gen)))
        return out
    out.append(int(torch.multinomial(p[k], 1, generator=gen)))
    return out
