"""Causal sliding-window attention with grouped K/V heads, for one sequence of T tokens."""

import torch


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None
) -> torch.Tensor:
    """q [T, H, hd], k and v [T, KV, hd] -> [T, H, hd]; query i sees keys j <= i with
    i - j < window (every j <= i when window is None)."""
    raise NotImplementedError("sliding_window_attention")
