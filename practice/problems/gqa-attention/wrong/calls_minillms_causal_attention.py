"""Wrong: calls minillm's causal_attention on each query's window instead of writing the
attention (the right numbers, from chapter 1's code).

Caught by: test_writes_the_attention_with_torch_alone.
"""

import torch

from minillm.model import causal_attention


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None
) -> torch.Tensor:
    """q [T, H, hd], k and v [T, KV, hd] -> [T, H, hd]; query i sees keys j <= i with
    i - j < window (every j <= i when window is None)."""
    T, H, hd = q.shape
    out = torch.empty_like(q)
    for i in range(T):
        first = 0 if window is None else max(0, i - window + 1)
        # one query against its window: the bottom-right causal mask lets it see all of them
        out[i] = causal_attention(
            q[None, i : i + 1], k[None, first : i + 1], v[None, first : i + 1], hd**-0.5
        )[0, 0]
    return out
