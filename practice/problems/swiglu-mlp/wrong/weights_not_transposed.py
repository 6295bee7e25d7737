"""Wrong: computes x @ weight (no .T), right only when the layout does not matter.

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
    gate = x @ gate_weight  # [..., inter]
    up = x @ up_weight
    hidden = gate * torch.sigmoid(gate) * up  # silu on the gate only, then the elementwise gate
    return hidden @ down_weight  # [..., d]
