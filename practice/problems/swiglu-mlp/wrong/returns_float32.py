"""Wrong: computes in float32 and returns float32 for half-precision inputs.

Caught by: test_half_precision_stays_half_precision.
"""

import torch


def swiglu_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
) -> torch.Tensor:
    """x [..., d]; gate_weight, up_weight [inter, d]; down_weight [d, inter] -> [..., d]."""
    x = x.float()
    gate = x @ gate_weight.float().T  # [..., inter]
    up = x @ up_weight.float().T
    hidden = gate * torch.sigmoid(gate) * up  # silu on the gate only, then the elementwise gate
    return hidden @ down_weight.float().T  # [..., d]
