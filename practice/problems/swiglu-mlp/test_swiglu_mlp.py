"""Tests for swiglu_mlp: against minillm.model.MLP over many sizes and batch layouts, and by
hand."""

import math
import random

import pytest
import torch
from grading import check_close

from minillm.model import MLP, ModelConfig


def random_mlp(d, inter, seed=0, dtype=torch.float32):
    cfg = ModelConfig(
        vocab_size=16,
        hidden_size=d,
        intermediate_size=inter,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=d,
    )
    mlp = MLP(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(2 * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return mlp.to(dtype)


def weights(mlp):
    return (
        mlp.gate_proj.weight.detach(),
        mlp.up_proj.weight.detach(),
        mlp.down_proj.weight.detach(),
    )


def scalar(v):
    return torch.tensor([[float(v)]])


def silu(z):
    """z * sigmoid(z), written so that no exp overflows, whatever the sign of z."""
    return z / (1 + math.exp(-z)) if z >= 0 else z * math.exp(z) / (1 + math.exp(z))


def test_silu_is_z_times_sigmoid_z(learner):
    """silu(z) = z * sigmoid(z) for every gate: not sigmoid(z), not relu, not gelu; and finite
    for
    large gates, in float32 and in float16 (exp(z) / (1 + exp(z)) is inf / inf once exp(z)
    overflows: use torch.sigmoid or F.silu, which never do)."""
    rng = random.Random(4)
    for dtype, top, tol in ((torch.float32, 1e4, 1e-6), (torch.float16, 200.0, 2e-3)):
        edges = [2.0, -1.5, 0.3, 0.0, 11.5, 12.0, 30.0, 89.0, 100.0, top]
        values = edges + [-v for v in edges] + [rng.uniform(-top, top) for _ in range(8)]
        x = torch.tensor(values, dtype=dtype)[:, None]  # [n, 1]: one gate per row
        one = scalar(1).to(dtype)
        got = learner.swiglu_mlp(x, one, one, one)
        want = torch.tensor([[silu(float(v)) * float(v)] for v in x[:, 0]], dtype=torch.float64)
        check_close(
            got,
            want,
            f"swiglu_mlp(x) in {dtype} with all weights 1, for the gates {show_values(x)}",
            atol=tol,
            rtol=tol,
        )


def show_values(x):
    return "[" + ", ".join(f"{float(v):g}" for v in x[:, 0]) + "]"


def test_activation_goes_on_the_gate_branch(learner):
    """silu(gate(x)) * up(x): the activation is on the gate, and up stays linear."""
    got = learner.swiglu_mlp(scalar(1), scalar(2), scalar(-3), scalar(0.5))
    check_close(
        got,
        scalar(silu(2) * -3 * 0.5),
        "swiglu_mlp(x=1) with gate 2, up -3, down 0.5",
        atol=1e-6,
    )


def test_weights_are_laid_out_like_nn_linear(learner):
    """nn.Linear stores [out_features, in_features] and computes x @ weight.T."""
    mlp = random_mlp(
        3, 3, seed=1
    )  # square weights: the wrong layout gives wrong numbers, not an error
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        check_close(
            learner.swiglu_mlp(x, *weights(mlp)),
            mlp(x),
            "swiglu_mlp with 3 x 3 weights",
            atol=1e-5,
        )


SIZES = [  # d, intermediate, leading dimensions of x
    (16, 40, (2, 5)),
    (64, 24, (7,)),
    (5, 11, (1, 1, 1)),
    (1, 6, (3,)),
    (32, 96, ()),
    (12, 12, (2, 3, 2)),
]


@pytest.mark.parametrize("case", range(len(SIZES)))
def test_matches_minillm_for_any_size_and_batch(learner, case):
    """down(silu(gate(x)) * up(x)) on [..., d], whatever d, the intermediate size and the
    leading dimensions."""
    d, inter, lead = SIZES[case]
    mlp = random_mlp(d, inter, seed=3 + case)
    x = torch.randn(*lead, d, generator=torch.Generator().manual_seed(20 + case))
    with torch.no_grad():
        check_close(
            learner.swiglu_mlp(x, *weights(mlp)),
            mlp(x),
            f"swiglu_mlp(x {list(x.shape)}) widened to {inter} and back",
            atol=1e-5,
            rtol=1e-5,
        )


def test_half_precision_stays_half_precision(learner):
    """x and the weights in bfloat16 give a bfloat16 result (the matrix products keep x's
    dtype)."""
    mlp = random_mlp(16, 32, seed=9, dtype=torch.bfloat16)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(10)).bfloat16()
    with torch.no_grad():
        check_close(
            learner.swiglu_mlp(x, *weights(mlp)),
            mlp(x),
            "swiglu_mlp in bfloat16",
            atol=3e-2,
            rtol=3e-2,
            dtype=torch.bfloat16,
        )
