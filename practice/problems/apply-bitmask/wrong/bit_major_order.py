"""Wrong: unpacks to [M, 32, W] (bit-major) and flattens that, so token t is read from bit
t // W of word t % W.

Caught by: test_the_example.
"""

import torch


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """A copy of logits [M, V] with the forbidden tokens of the listed rows set to -inf."""
    M, V = logits.shape
    W = (V + 31) // 32
    if bitmask.shape[0] != M or bitmask.shape[1] < W:
        raise ValueError(
            f"bitmask has shape {list(bitmask.shape)}, logits {list(logits.shape)}: "
            f"expected [{M}, >= {W}]"
        )
    shifts = torch.arange(32, dtype=torch.int32)
    bits = (bitmask[:, None, :W].to(torch.int32) >> shifts[:, None]) & 1  # [M, 32, W]
    allowed = bits.reshape(M, 32 * W)[:, :V].bool()  # [M, V], in the wrong order
    listed = torch.zeros(M, 1, dtype=torch.bool)
    listed[list(rows)] = True
    keep = allowed | ~listed  # rows without a grammar keep every token
    return torch.where(keep, logits, torch.full_like(logits, float("-inf")))
