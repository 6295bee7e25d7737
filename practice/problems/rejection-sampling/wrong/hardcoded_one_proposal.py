"""Wrong: handles only the example's single proposal; later ones are ignored.

Caught by: test_the_draws_follow_the_prescribed_order.
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
    if k == 0:
        return [int(torch.multinomial(p[0], 1, generator=gen))]
    x = draft[0]
    u = torch.rand((), generator=gen, dtype=torch.float64)
    if u * q[0, x] < p[0, x]:
        return [int(x), int(torch.multinomial(p[1], 1, generator=gen))]
    return [int(torch.multinomial((p[0] - q[0]).clamp(min=0), 1, generator=gen))]
