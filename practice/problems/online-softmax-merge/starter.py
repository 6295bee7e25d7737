"""Partial softmax results (o, m, l) over pieces of the keys, merged into attention over all of
them."""

import torch


def partial_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """q [Q, d], k, v [n, d] -> (o [Q, d] normalised over these keys, m [Q] row max, l [Q] sum
    of exp(s - m))."""
    raise NotImplementedError("partial_attention")


def merge_partials(a, b):
    """Two (o, m, l) over disjoint keys -> the (o, m, l) over their union."""
    raise NotImplementedError("merge_partials")


def chunked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, chunk: int
) -> torch.Tensor:
    """softmax(q k^T * scale) v [Q, d], computed chunk keys at a time and merged left to
    right."""
    raise NotImplementedError("chunked_attention")
