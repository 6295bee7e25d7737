"""Wrong: fits the example's 1 x 1 weights: multiplies elementwise instead of by the matrices.

Caught by: test_weights_are_laid_out_like_nn_linear.
"""

import torch


def swiglu_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
) -> torch.Tensor:
    """x [..., d]; gate_weight, up_weight [inter, d]; down_weight [d, inter] -> [..., d]."""
    gate = x * gate_weight.flatten()[0]
    up = x * up_weight.flatten()[0]
    hidden = gate * torch.sigmoid(gate) * up  # silu on the gate only, then the elementwise gate
    return hidden * down_weight.flatten()[0]
