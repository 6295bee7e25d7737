"""Wrong: takes exp of the raw scores and divides by exp(m) afterwards: right on paper, inf /
inf = NaN for scores in the thousands.

Caught by: test_huge_scores_stay_finite.
"""

import torch


def partial_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """q [Q, d], k, v [n, d] -> (o [Q, d] normalised over these keys, m [Q] row max, l [Q] sum
    of exp(s - m))."""
    s = q @ k.T * scale  # [Q, n]
    m = s.max(dim=-1).values  # [Q]
    p = torch.exp(s) / torch.exp(m)[:, None]  # overflows before the division
    l = p.sum(dim=-1)  # [Q]
    return (p @ v) / l[:, None], m, l


def merge_partials(a, b):
    """Two (o, m, l) over disjoint keys -> the (o, m, l) over their union."""
    (o1, m1, l1), (o2, m2, l2) = a, b
    m = torch.maximum(m1, m2)
    w1, w2 = (
        l1 * torch.exp(m1 - m),
        l2 * torch.exp(m2 - m),
    )  # both sums measured from the common max
    l = w1 + w2
    return (w1[:, None] * o1 + w2[:, None] * o2) / l[:, None], m, l


def chunked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, chunk: int
) -> torch.Tensor:
    """softmax(q k^T * scale) v [Q, d], computed chunk keys at a time and merged left to
    right."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk is {chunk!r}: expected an int >= 1")
    state = partial_attention(q, k[:chunk], v[:chunk], scale)
    for start in range(chunk, k.shape[0], chunk):
        state = merge_partials(
            state,
            partial_attention(q, k[start : start + chunk], v[start : start + chunk], scale),
        )
    return state[0]
