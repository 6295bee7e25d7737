"""Tests for rms_norm and fused_add_rms_norm: against a float64 computation written here (not
the solution file), over many shapes, eps and dtypes, and by hand.

The expected values are exact: the sum and the norm in float64, the normalised vector rounded
once to x's dtype, then multiplied by the weight and rounded once more (a product of two
bfloat16 or float16 values is exact in float64, so that rounding is the one torch does). A
float32 computation, done as the task says, agrees with them in all but a few entries of one
unit in the last place.
"""

import pytest
import torch
from grading import check_close, check_rounding, fail

HALF = [torch.bfloat16, torch.float16]
HALF_IDS = ["bfloat16", "float16"]


def normalise(s, weight, eps, dtype):
    """s (float64) / sqrt(mean(s^2) + eps), rounded to dtype, times weight, rounded again."""
    normed = s * torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (normed.to(dtype).double() * weight.double()).to(dtype)


def reference_norm(x, weight, eps):
    return normalise(x.double(), weight, eps, x.dtype)


def reference_fused(x, residual, weight, eps):
    """(normed, new_residual): the norm reads the exact sum, not the sum rounded to x's
    dtype."""
    s = x.double() + residual.double()
    return normalise(s, weight, eps, x.dtype), s.to(x.dtype)


def random_case(shape, seed, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = (scale * torch.randn(*shape, generator=g)).to(dtype)
    residual = (scale * torch.randn(*shape, generator=g)).to(dtype)
    w = (1 + 0.5 * torch.randn(shape[-1], generator=g)).to(dtype)
    return x, residual, w


def fused(learner, *args, what):
    """The learner's (normed, new_residual), checked to be a pair of tensors."""
    out = learner.fused_add_rms_norm(*args)
    if (
        not isinstance(out, (tuple, list))
        or len(out) != 2
        or not all(isinstance(t, torch.Tensor) for t in out)
    ):
        fail(f"{what} should return a tuple (normed, new_residual) of two tensors, got {out!r}")
    return out


SHAPES = [(7,), (3, 5), (2, 3, 17), (2, 3, 4, 16), (1, 1, 1, 96), (4, 1)]
EPS = [1e-6, 1e-5, 0.1, 1.0, 3.0, 0.0]


@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_rms_norm_matches_float64_for_any_shape_and_eps(learner, case):
    """The plain norm: over the last dimension only, with the eps you are given, whatever the
    leading dimensions."""
    shape, eps = SHAPES[case], EPS[case]
    x, _, w = random_case(shape, seed=case, scale=0.5 + case)
    check_close(
        learner.rms_norm(x, w, eps),
        reference_norm(x, w, eps),
        f"rms_norm(x {list(shape)}, weight, eps={eps})",
        atol=1e-5,
        rtol=1e-5,
        dtype=torch.float32,
    )


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
def test_rms_norm_half_precision_is_computed_in_float32_and_rounded_once(learner, dtype):
    """Upcast with x.float(), normalise, cast back with .to(x.dtype), then multiply by the
    weight (in x's dtype)."""
    x, _, w = random_case((16, 256), seed=2, dtype=dtype, scale=3.0)
    check_rounding(
        learner.rms_norm(x, w, 1e-6),
        reference_norm(x, w, 1e-6),
        f"rms_norm(x [16, 256] in {dtype})",
    )


@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_fused_matches_float64_for_any_shape_and_eps(learner, case):
    """normed = rms_norm(x + residual) * weight over the last dimension only, with the eps you
    are given; new_residual = x + residual."""
    shape, eps = SHAPES[case], EPS[case]
    x, residual, w = random_case(shape, seed=10 + case, scale=0.5 + case)
    what = f"fused_add_rms_norm(x {list(shape)}, residual, weight, eps={eps})"
    normed, new_residual = fused(learner, x, residual, w, eps, what=what)
    expected, expected_residual = reference_fused(x, residual, w, eps)
    check_close(normed, expected, f"normed of {what}", atol=1e-5, rtol=1e-5, dtype=x.dtype)
    check_close(
        new_residual, expected_residual, f"new_residual of {what}", atol=0, dtype=x.dtype
    )


def test_returns_the_normed_sum_then_the_sum(learner):
    """Return (normed, new_residual) in that order: the norm of x + residual, and x + residual
    itself."""
    x, residual = torch.tensor([[1.0, 2.0]]), torch.tensor([[2.0, 2.0]])
    what = "fused_add_rms_norm([[1, 2]], [[2, 2]], ones, eps=0)"
    normed, new_residual = fused(learner, x, residual, torch.ones(2), 0.0, what=what)
    check_close(normed, torch.tensor([[3.0, 4.0]]) / 12.5**0.5, f"normed of {what}", atol=1e-6)
    check_close(new_residual, torch.tensor([[3.0, 4.0]]), f"new_residual of {what}", atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=["float32", *HALF_IDS])
def test_new_residual_is_x_plus_residual(learner, dtype):
    """new_residual is the sum x + residual (not the old residual), rounded once to x's dtype:
    cast the float32 sum back."""
    x, residual, w = random_case((2, 3, 64), seed=4, dtype=dtype, scale=2.0)
    what = f"new_residual of fused_add_rms_norm(x [2, 3, 64] in {dtype}, residual, weight)"
    _, new_residual = fused(learner, x, residual, w, 1e-6, what=what)
    check_close(
        new_residual, reference_fused(x, residual, w, 1e-6)[1], what, atol=0, dtype=dtype
    )


def test_normalises_the_sum_not_x(learner):
    """Normalise x + residual: not x alone, and not norm(x) + residual (add first, then
    normalise)."""
    x, residual = (
        torch.tensor([[3.0, 4.0], [1.0, 1.0]]),
        torch.tensor([[-2.0, -4.0], [1.0, 3.0]]),
    )
    what = "fused_add_rms_norm([[3, 4], [1, 1]], [[-2, -4], [1, 3]], ones, eps=0)"
    normed, _ = fused(learner, x, residual, torch.ones(2), 0.0, what=what)
    s = x + residual  # [[1, 0], [2, 4]]
    check_close(
        normed, s / s.pow(2).mean(-1, keepdim=True).sqrt(), f"normed of {what}", atol=1e-6
    )


def test_eps_is_added_inside_the_square_root(learner):
    """(x + residual) / sqrt(mean((x + residual)^2) + eps): eps goes under the root, not after
    it, and it is the eps argument."""
    x, residual = (
        torch.tensor([[2.0, 3.0], [0.25, -0.25]]),
        torch.tensor([[1.0, 1.0], [0.25, -0.25]]),
    )
    s = x + residual  # [[3, 4], [0.5, -0.5]]
    for eps in (1.0, 0.25, 7.0):
        what = (
            f"fused_add_rms_norm(x, residual, ones, eps={eps}), the sum [[3, 4], [0.5, -0.5]]"
        )
        normed, _ = fused(learner, x, residual, torch.ones(2), eps, what=what)
        expected = s / (s.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        check_close(normed, expected, f"normed of {what}", atol=1e-6)


def test_default_eps_is_one_in_a_million(learner):
    """The starter's default eps=1e-6 is Qwen3's: keep it, in both functions."""
    x, residual = torch.tensor([[1e-3, -1e-3, 2e-3]]), torch.tensor([[0.0, -1e-3, 1e-3]])
    for s, got, what in [
        (
            x,
            learner.rms_norm(x, torch.ones(3)),
            "rms_norm of a tiny vector with the default eps",
        ),
        (
            x + residual,
            fused(learner, x, residual, torch.ones(3), what="fused_add_rms_norm")[0],
            "normed of fused_add_rms_norm of tiny vectors with the default eps",
        ),
    ]:
        check_close(got, s / (s.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt(), what, atol=1e-6)


def test_scales_each_feature_by_its_weight(learner):
    """Multiply the normalised sum by weight (not by 1 + weight, and not left out)."""
    x, residual = torch.tensor([[1.0, 5.0, -2.0]]), torch.tensor([[2.0, -1.0, 2.0]])
    w = torch.tensor([2.0, -1.0, 5.0])
    what = "fused_add_rms_norm([[1, 5, -2]], [[2, -1, 2]], weight=[2, -1, 5], eps=0)"
    normed, _ = fused(learner, x, residual, w, 0.0, what=what)
    rms = (25 / 3) ** 0.5  # the sum is [3, 4, 0]
    check_close(
        normed, torch.tensor([[2 * 3 / rms, -4 / rms, 0.0]]), f"normed of {what}", atol=1e-6
    )


def test_normalises_each_vector_on_its_own(learner):
    """One RMS per vector: mean over dim=-1 with keepdim=True, not over the whole tensor or
    another dimension."""
    s = torch.tensor(
        [[[1.0, -2.0, 3.0], [100.0, 200.0, -300.0]], [[0.01, 0.02, 0.03], [5.0, 5.0, 5.0]]]
    )
    x, residual = s / 4, 3 * s / 4  # exact in float32
    what = "fused_add_rms_norm of four vectors of very different sizes"
    normed, _ = fused(learner, x, residual, torch.ones(3), 1e-6, what=what)
    expected = s / (s.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    check_close(normed, expected, f"normed of {what}", atol=1e-5)


def test_half_precision_input_does_not_overflow(learner):
    """Square in float32: sums of 300 and more square beyond float16's largest value (65504).
    Upcast before you add."""
    g = torch.Generator().manual_seed(1)
    x = (150 + 350 * torch.rand(4, 32, generator=g)).half()
    residual = (150 + 350 * torch.rand(4, 32, generator=g)).half()
    w = (1 + 0.1 * torch.randn(32, generator=g)).half()
    what = "fused_add_rms_norm(x, residual in float16, values 150..500)"
    normed, _ = fused(learner, x, residual, w, 1e-6, what=what)
    check_close(
        normed,
        reference_fused(x, residual, w, 1e-6)[0],
        f"normed of {what}",
        atol=2e-3,
        rtol=2e-3,
        dtype=torch.float16,
    )


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
def test_half_precision_normalises_the_float32_sum_rounded_once(learner, dtype):
    """Add x.float() + residual.float() and normalise that float32 sum (not the sum rounded to
    x's dtype); cast with .to(x.dtype), then multiply by the weight."""
    x, residual, w = random_case((16, 256), seed=2, dtype=dtype, scale=3.0)
    what = f"fused_add_rms_norm(x [16, 256] in {dtype}, residual, weight)"
    normed, _ = fused(learner, x, residual, w, 1e-6, what=what)
    check_rounding(normed, reference_fused(x, residual, w, 1e-6)[0], f"normed of {what}")


def test_float64_keeps_its_dtype_and_shape(learner):
    """Both results have x's shape and dtype, for float64 too (computing in float32 inside is
    fine)."""
    x, residual, w = random_case((3, 2, 8), seed=3, dtype=torch.float64)
    what = "fused_add_rms_norm(x [3, 2, 8] in float64, residual, weight)"
    normed, new_residual = fused(learner, x, residual, w, 1e-6, what=what)
    expected, expected_residual = reference_fused(x, residual, w, 1e-6)
    check_close(normed, expected, f"normed of {what}", atol=1e-6, dtype=torch.float64)
    check_close(
        new_residual,
        expected_residual,
        f"new_residual of {what}",
        atol=1e-6,
        dtype=torch.float64,
    )


def test_leaves_its_inputs_as_they_were(learner):
    """Build new tensors: vLLM's CUDA op adds into residual and writes into x in place, but here
    (as in forward_native) the caller's x, residual and weight stay as they were."""
    for dtype in (torch.float32, torch.bfloat16):
        x, residual, w = random_case((3, 16), seed=5, dtype=dtype)
        what = f"fused_add_rms_norm(x [3, 16] in {dtype}, residual, weight)"
        normed, new_residual = fused(learner, x, residual, w, 1e-6, what=what)
        expected, expected_residual = reference_fused(x, residual, w, 1e-6)
        check_close(new_residual, expected_residual, f"new_residual of {what}", atol=0)
        check_close(normed, expected, f"normed of {what}", atol=1e-2, rtol=1e-2)
