"""Wrong: takes the split point from x's last dimension (d) instead of the weight's (I): right
only when d == I.

Caught by: test_matches_minillm_for_any_size_and_batch.
"""

import torch


def fuse_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """gate_weight, up_weight [I, d] -> gate_up_weight [2*I, d]: the gate's rows, then up's."""
    return torch.cat([gate_weight, up_weight], dim=0)  # shard 0 = gate, shard 1 = up


def swiglu_mlp(
    x: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor
) -> torch.Tensor:
    """x [..., d]; gate_up_weight [2*I, d]; down_weight [d, I] -> [..., d] in x's dtype."""
    d = x.shape[-1]
    gate_up = x @ gate_up_weight.T  # [..., 2*I]
    gate, up = gate_up[..., :d], gate_up[..., d:]  # should split at I, not d
    hidden = gate * torch.sigmoid(gate) * up
    return hidden @ down_weight.T  # [..., d]
