"""Wrong: fits the example's 1 x 1 weights: multiplies elementwise by one number of each
weight instead of by the matrices.

Caught by: test_weights_are_laid_out_like_nn_linear.
"""

import torch


def fuse_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """gate_weight, up_weight [I, d] -> gate_up_weight [2*I, d]: the gate's rows, then up's."""
    return torch.cat([gate_weight, up_weight], dim=0)  # shard 0 = gate, shard 1 = up


def swiglu_mlp(
    x: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor
) -> torch.Tensor:
    """x [..., d]; gate_up_weight [2*I, d]; down_weight [d, I] -> [..., d] in x's dtype."""
    gate = x * gate_up_weight.flatten()[0]
    up = x * gate_up_weight.flatten()[-1]
    hidden = gate * torch.sigmoid(gate) * up
    return hidden * down_weight.flatten()[0]
