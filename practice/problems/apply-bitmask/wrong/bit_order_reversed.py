"""Wrong: reads the bits of a word from the most significant end (token t is bit 31 - t % 32).

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
    shifts = torch.arange(31, -1, -1, dtype=torch.int32)
    bits = (bitmask[:, :W, None].to(torch.int32) >> shifts) & 1  # [M, W, 32]
    allowed = bits.reshape(M, 32 * W)[:, :V].bool()  # [M, V] in token order
    listed = torch.zeros(M, 1, dtype=torch.bool)
    listed[list(rows)] = True
    keep = allowed | ~listed  # rows without a grammar keep every token
    return torch.where(keep, logits, torch.full_like(logits, float("-inf")))
