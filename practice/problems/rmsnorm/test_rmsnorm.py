"""Tests for rms_norm: against minillm.model.RMSNorm over many shapes, eps and dtypes, and by
hand."""

import pytest
import torch
from grading import check_close, check_rounding

from minillm.model import RMSNorm


def reference(x, weight, eps):
    norm = RMSNorm(x.shape[-1], eps).to(x.dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def random_case(shape, seed, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = (scale * torch.randn(*shape, generator=g)).to(dtype)
    w = (1 + 0.5 * torch.randn(shape[-1], generator=g)).to(dtype)
    return x, w


SHAPES = [(7,), (3, 5), (2, 3, 17), (2, 3, 4, 16), (1, 1, 1, 96), (4, 1)]
EPS = [1e-6, 1e-5, 0.1, 1.0, 3.0, 0.0]


@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_matches_minillm_for_any_shape_and_eps(learner, case):
    """Normalise over the last dimension only, with the eps you are given, whatever the leading
    dimensions."""
    shape, eps = SHAPES[case], EPS[case]
    x, w = random_case(shape, seed=case, scale=0.5 + case)
    check_close(
        learner.rms_norm(x, w, eps),
        reference(x, w, eps),
        f"rms_norm(x {list(shape)}, weight, eps={eps})",
        atol=1e-5,
        rtol=1e-5,
    )


def test_eps_is_added_inside_the_square_root(learner):
    """x / sqrt(mean(x^2) + eps): eps goes under the root, not after it, and it is the eps
    argument."""
    x = torch.tensor([[3.0, 4.0], [0.5, -0.5]])
    for eps in (1.0, 0.25, 7.0):
        expected = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        check_close(
            learner.rms_norm(x, torch.ones(2), eps),
            expected,
            f"rms_norm([[3, 4], [0.5, -0.5]], eps={eps})",
            atol=1e-6,
        )


def test_default_eps_is_one_in_a_million(learner):
    """The starter's default eps=1e-6 is Qwen3's: keep it."""
    x = torch.tensor([[1e-3, -1e-3, 2e-3]])
    expected = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    check_close(
        learner.rms_norm(x, torch.ones(3)),
        expected,
        "rms_norm of a tiny vector with the default eps",
        atol=1e-6,
    )


def test_scales_each_feature_by_its_weight(learner):
    """Multiply the normalised vector by weight (not by 1 + weight, and not left out)."""
    x, w = torch.tensor([[3.0, 4.0, 0.0]]), torch.tensor([2.0, -1.0, 5.0])
    rms = (25 / 3) ** 0.5
    check_close(
        learner.rms_norm(x, w, eps=0.0),
        torch.tensor([[2 * 3 / rms, -4 / rms, 0.0]]),
        "rms_norm([[3, 4, 0]], weight=[2, -1, 5], eps=0)",
        atol=1e-6,
    )


def test_normalises_each_vector_on_its_own(learner):
    """One RMS per vector: mean over dim=-1 with keepdim=True, not over the whole tensor or
    another dimension."""
    x = torch.tensor(
        [[[1.0, -2.0, 3.0], [100.0, 200.0, -300.0]], [[0.01, 0.02, 0.03], [5.0, 5.0, 5.0]]]
    )
    expected = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    check_close(
        learner.rms_norm(x, torch.ones(3), 1e-6),
        expected,
        "rms_norm of four vectors of very different sizes",
        atol=1e-5,
    )


def test_half_precision_input_does_not_overflow(learner):
    """Square in float32: 300**2 is beyond float16's largest value (65504). Use x.float()
    first."""
    g = torch.Generator().manual_seed(1)
    x = (300 + 700 * torch.rand(4, 32, generator=g)).half()
    w = (1 + 0.1 * torch.randn(32, generator=g)).half()
    check_close(
        learner.rms_norm(x, w),
        reference(x, w, 1e-6),
        "rms_norm(x in float16, values 300..1000)",
        atol=2e-3,
        rtol=2e-3,
        dtype=torch.float16,
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_half_precision_is_computed_in_float32_and_rounded_once(learner, dtype):
    """Upcast with x.float(), normalise, cast back with .to(x.dtype), then multiply by the
    weight (in x's dtype)."""
    x, w = random_case((16, 256), seed=2, dtype=dtype, scale=3.0)
    got = learner.rms_norm(x, w, 1e-6)
    check_rounding(got, reference(x, w, 1e-6), f"rms_norm(x [16, 256] in {dtype})")


def test_result_keeps_the_input_dtype_and_shape(learner):
    """The result has x's shape and dtype, for float64 too."""
    x, w = random_case((3, 2, 8), seed=3, dtype=torch.float64)
    check_close(
        learner.rms_norm(x, w, 1e-6),
        reference(x, w, 1e-6),
        "rms_norm(x [3, 2, 8] in float64)",
        atol=1e-6,
        dtype=torch.float64,
    )
