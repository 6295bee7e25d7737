"""Partial softmax results (o, lse) over pieces of the keys, in log-sum-exp form, merged N at a
time into attention over all of them; a piece whose keys are all masked merges as nothing."""

import torch


def partial_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask=None
):
    """q [Q, d], k, v [n, d], mask [Q, n] bool (True: the row sees the key) or None ->
    (o [Q, d] normalised over the keys a row sees, lse [Q] = log of the sum of exp(s) over
    them). A row that sees no key: o = 0, lse = -inf."""
    raise NotImplementedError("partial_attention")


def merge_partials(parts):
    """A list of (o [Q, d], lse [Q]) over disjoint keys -> the (o, lse) over their union."""
    raise NotImplementedError("merge_partials")


def chunked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, chunk: int
) -> torch.Tensor:
    """softmax(q k^T * scale) v [Q, d], computed chunk keys at a time and merged in one N-way
    merge."""
    raise NotImplementedError("chunked_attention")
