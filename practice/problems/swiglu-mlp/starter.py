"""SwiGLU as vLLM runs it: one matmul by a fused [2*I, d] gate_up weight, then
silu(gate) * up, then down. Weights in nn.Linear layout, [out_features, in_features]."""

import torch


def fuse_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """gate_weight, up_weight [I, d] -> gate_up_weight [2*I, d], as vLLM's loader fuses them."""
    raise NotImplementedError("fuse_gate_up")


def swiglu_mlp(
    x: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor
) -> torch.Tensor:
    """x [..., d]; gate_up_weight [2*I, d]; down_weight [d, I] -> [..., d] in x's dtype."""
    raise NotImplementedError("swiglu_mlp")
