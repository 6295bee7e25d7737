"""Wrong: accepts with probability min(1, q/p), the ratio upside down.

Caught by: test_a_proposal_the_target_likes_more_is_always_accepted.
"""

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
            f"p has shape {tuple(p.shape)} and q {tuple(q.shape)} for {k} proposals"
        )
    gen = torch.Generator().manual_seed(seed)
    out = []
    for j, x in enumerate(draft):
        u = torch.rand((), generator=gen, dtype=torch.float64)
        if u * p[j, x] < q[j, x]:
            out.append(int(x))
            continue
        out.append(int(torch.multinomial((p[j] - q[j]).clamp(min=0), 1, generator=gen)))
        return out
    out.append(int(torch.multinomial(p[k], 1, generator=gen)))
    return out
