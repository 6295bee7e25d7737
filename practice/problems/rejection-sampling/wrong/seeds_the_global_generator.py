"""Wrong: seeds torch's global generator and draws from it: the same tokens, but every call
resets
the random stream of the whole process (every other sampler's draws start over).

Caught by: test_the_global_random_state_is_left_alone.
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
            f"p has shape {tuple(p.shape)} and q {tuple(q.shape)} for {k} proposals: "
            f"expected [{k + 1}, V] and [{k}, V]"
        )
    torch.manual_seed(seed)  # the same stream as a generator seeded so
    out = []
    for j, x in enumerate(draft):
        u = torch.rand((), dtype=torch.float64)
        if u * q[j, x] < p[j, x]:
            out.append(int(x))
            continue
        residual = (p[j] - q[j]).clamp(min=0)
        out.append(int(torch.multinomial(residual, 1)))
        return out
    out.append(int(torch.multinomial(p[k], 1)))
    return out
