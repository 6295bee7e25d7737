"""Wrong: computes the sigmoid as exp(z) / (1 + exp(z)): right for small gates, NaN (inf / inf)
once
exp(z) overflows (z above 88 in float32, above 11 in float16).

Caught by: test_silu_is_z_times_sigmoid_z.
"""

import torch


def swiglu_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
) -> torch.Tensor:
    """x [..., d]; gate_weight, up_weight [inter, d]; down_weight [d, inter] -> [..., d]."""
    gate = x @ gate_weight.T  # [..., inter]
    up = x @ up_weight.T
    sigmoid = torch.exp(gate) / (1 + torch.exp(gate))  # 1 / (1 + exp(-z)), multiplied by exp(z)
    hidden = gate * sigmoid * up
    return hidden @ down_weight.T  # [..., d]
