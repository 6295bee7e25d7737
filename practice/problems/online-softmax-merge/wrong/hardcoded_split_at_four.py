"""Wrong: splits the keys at 4 as the example does, whatever chunk is, so a bad chunk size is
never refused.

Caught by: test_a_chunk_below_one_is_refused_by_name.
"""

import torch


def partial_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """q [Q, d], k, v [n, d] -> (o [Q, d] normalised over these keys, m [Q] row max, l [Q] sum
    of exp(s - m))."""
    s = q @ k.T * scale  # [Q, n]
    m = s.max(dim=-1).values  # [Q]
    p = torch.exp(s - m[:, None])  # at most 1: no overflow, whatever the scores
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
    if k.shape[0] <= 4:
        return partial_attention(q, k, v, scale)[0]
    return merge_partials(
        partial_attention(q, k[:4], v[:4], scale), partial_attention(q, k[4:], v[4:], scale)
    )[0]
