"""Tests for fuse_gate_up and swiglu_mlp: the fused weight's row order, and the forward pass
against minillm.model.MLP (three separate projections) over many sizes and batch layouts, and by
hand."""

import math
import random

import pytest
import torch
from grading import check_close, fail

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


def fused_weights(mlp):
    """(gate_up [2*I, d] built here, gate rows first as vLLM stores them; down [d, I])."""
    gate, up = mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach()
    return torch.cat([gate, up]), mlp.down_proj.weight.detach()


def scalar(v):
    return torch.tensor([[float(v)]])


def silu(z):
    """z * sigmoid(z), written so that no exp overflows, whatever the sign of z."""
    return z / (1 + math.exp(-z)) if z >= 0 else z * math.exp(z) / (1 + math.exp(z))


def test_fuse_gate_up_lays_out_the_shards_as_vllms_loader_does(learner):
    """fuse_gate_up builds the [2*I, d] weight that vLLM's loader builds from the checkpoint's
    two tensors: each shard at its offset along the output dimension."""
    g = torch.Generator().manual_seed(5)
    for inter, d in [(3, 5), (4, 2), (1, 1), (6, 6)]:
        gate, up = torch.randn(inter, d, generator=g), torch.randn(inter, d, generator=g)
        got = learner.fuse_gate_up(gate.clone(), up.clone())
        what = f"fuse_gate_up(gate [{inter}, {d}], up [{inter}, {d}])"
        swapped = torch.cat([up, gate])
        if isinstance(got, torch.Tensor) and got.shape == swapped.shape and got.equal(swapped):
            fail(
                f"{what} puts up's rows first: which shard number does stacked_params_mapping "
                "give gate_proj, and at which offset does weight_loader copy that shard?"
            )
        check_close(got, torch.cat([gate, up]), what, atol=0.0, dtype=torch.float32)


def test_silu_is_z_times_sigmoid_z(learner):
    """silu(z) = z * sigmoid(z) for every gate: not sigmoid(z), not relu, not gelu; and finite
    for large gates, in float32 and in float16 (exp(z) / (1 + exp(z)) is inf / inf once exp(z)
    overflows: use torch.sigmoid or F.silu, which never do)."""
    rng = random.Random(4)
    for dtype, top, tol in ((torch.float32, 1e4, 1e-6), (torch.float16, 200.0, 2e-3)):
        edges = [2.0, -1.5, 0.3, 0.0, 11.5, 12.0, 30.0, 89.0, 100.0, top]
        values = edges + [-v for v in edges] + [rng.uniform(-top, top) for _ in range(8)]
        x = torch.tensor(values, dtype=dtype)[:, None]  # [n, 1]: one gate per row
        ones = torch.ones(2, 1, dtype=dtype)  # gate row 1, up row 1: gate = up = x
        got = learner.swiglu_mlp(x, ones, scalar(1).to(dtype))
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
    """silu(gate(x)) * up(x): the activation is on the gate's half of the product, and up stays
    linear."""
    got = learner.swiglu_mlp(scalar(1), torch.tensor([[2.0], [-3.0]]), scalar(0.5))
    check_close(
        got,
        scalar(silu(2) * -3 * 0.5),
        "swiglu_mlp(x=1) with gate_up = fuse_gate_up(gate [[2]], up [[-3]]), down 0.5",
        atol=1e-6,
    )


def test_weights_are_laid_out_like_nn_linear(learner):
    """nn.Linear stores [out_features, in_features] and computes x @ weight.T."""
    mlp = random_mlp(4, 2, seed=1)  # gate_up is 4 x 4: the wrong layout gives wrong numbers
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        check_close(
            learner.swiglu_mlp(x, *fused_weights(mlp)),
            mlp(x),
            "swiglu_mlp with d = 4, I = 2 (a 4 x 4 gate_up weight)",
            atol=1e-5,
        )


SIZES = [  # d, intermediate, leading dimensions of x
    (16, 40, (2, 5)),
    (64, 24, (7,)),
    (5, 11, (1, 1, 1)),
    (1, 6, (3,)),
    (32, 96, ()),
    (12, 12, (2, 3, 2)),
    (8, 4, (6, 8)),
    (10, 7, (3, 2)),  # I odd and smaller than d: a split at d, or at half of d, fails
]


@pytest.mark.parametrize("case", range(len(SIZES)))
def test_matches_minillm_for_any_size_and_batch(learner, case):
    """down(silu(gate(x)) * up(x)) on [..., d], whatever d, the intermediate size and the
    leading dimensions, from the checkpoint's two tensors fused by the test."""
    d, inter, lead = SIZES[case]
    mlp = random_mlp(d, inter, seed=3 + case)
    x = torch.randn(*lead, d, generator=torch.Generator().manual_seed(20 + case))
    with torch.no_grad():
        check_close(
            learner.swiglu_mlp(x, *fused_weights(mlp)),
            mlp(x),
            f"swiglu_mlp(x {list(x.shape)}) widened to 2 x {inter} and back",
            atol=1e-5,
            rtol=1e-5,
        )


def test_fused_from_the_checkpoint_tensors_matches_minillm(learner):
    """The loader's path end to end: fuse_gate_up on gate_proj and up_proj, then
    swiglu_mlp."""
    mlp = random_mlp(24, 40, seed=11)
    x = torch.randn(3, 4, 24, generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        gate_up = learner.fuse_gate_up(
            mlp.gate_proj.weight.detach().clone(), mlp.up_proj.weight.detach().clone()
        )
        check_close(
            learner.swiglu_mlp(x, gate_up, mlp.down_proj.weight.detach()),
            mlp(x),
            "swiglu_mlp(x [3, 4, 24], fuse_gate_up(gate_proj, up_proj), down_proj)",
            atol=1e-5,
            rtol=1e-5,
        )


def test_half_precision_stays_half_precision(learner):
    """x and the weights in bfloat16 give a bfloat16 result (the matrix products keep x's
    dtype), and so does the fused weight."""
    mlp = random_mlp(16, 32, seed=9, dtype=torch.bfloat16)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(10)).bfloat16()
    gate_up, down = fused_weights(mlp)
    with torch.no_grad():
        check_close(
            learner.fuse_gate_up(mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach()),
            gate_up,
            "fuse_gate_up in bfloat16",
            atol=0.0,
            dtype=torch.bfloat16,
        )
        check_close(
            learner.swiglu_mlp(x, gate_up, down),
            mlp(x),
            "swiglu_mlp in bfloat16",
            atol=3e-2,
            rtol=3e-2,
            dtype=torch.bfloat16,
        )
