"""Tests for rms_norm, against minillm.model.RMSNorm and values worked out by hand."""

import torch

from grading import check_close
from minillm.model import RMSNorm


def reference(x, weight, eps=1e-6):
    norm = RMSNorm(x.shape[-1], eps).to(x.dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def test_matches_minillm_rmsnorm(learner):
    """Divide every vector by its root mean square, then multiply by the weight."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 5, 64, generator=g), 1 + 0.1 * torch.randn(64, generator=g)
    check_close(learner.rms_norm(x, w), reference(x, w), "rms_norm(x [2, 5, 64], weight)", atol=1e-5)


def test_normalises_each_vector_over_the_last_dimension(learner):
    """One RMS per vector: mean over dim=-1 with keepdim=True, not over the whole tensor."""
    x = torch.tensor([[1.0, -2.0, 3.0], [100.0, 200.0, -300.0], [0.01, 0.02, 0.03]])
    expected = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    check_close(learner.rms_norm(x, torch.ones(3)), expected, "rms_norm of three rows of very different sizes",
                atol=1e-5)


def test_eps_is_added_inside_the_square_root(learner):
    """x / sqrt(mean(x^2) + eps): eps goes under the root, not after it."""
    got = learner.rms_norm(torch.tensor([[3.0, 4.0]]), torch.ones(2), eps=1.0)
    check_close(got, torch.tensor([[3 / 13.5 ** 0.5, 4 / 13.5 ** 0.5]]), "rms_norm([[3, 4]], eps=1.0)", atol=1e-5)


def test_scales_each_feature_by_its_weight(learner):
    """Multiply the normalised vector by weight (not by 1 + weight, and not left out)."""
    got = learner.rms_norm(torch.tensor([[3.0, 4.0]]), torch.tensor([2.0, -1.0]), eps=0.0)
    rms = 12.5 ** 0.5
    check_close(got, torch.tensor([[2 * 3 / rms, -4 / rms]]), "rms_norm([[3, 4]], weight=[2, -1], eps=0)", atol=1e-5)


def test_half_precision_input_does_not_overflow(learner):
    """Square in float32: 300**2 is beyond float16's largest value (65504). Use x.float() first."""
    g = torch.Generator().manual_seed(1)
    x = (300 + 700 * torch.rand(4, 32, generator=g)).half()
    w = (1 + 0.1 * torch.randn(32, generator=g)).half()
    check_close(learner.rms_norm(x, w), reference(x, w), "rms_norm(x in float16, values 300..1000)",
                atol=2e-3, rtol=2e-3)


def test_result_keeps_the_input_dtype(learner):
    """Cast the normalised float32 vector back with .to(x.dtype) before multiplying by the weight."""
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(3, 48, generator=g).bfloat16(), (1 + 0.1 * torch.randn(48, generator=g)).bfloat16()
    check_close(learner.rms_norm(x, w), reference(x, w), "rms_norm(x in bfloat16)", atol=2e-2, rtol=1e-2,
                dtype=torch.bfloat16)


def test_keeps_the_shape_of_any_batch(learner):
    """Work on the last dimension only, whatever the leading dimensions are ([B, T, heads, head_dim] for QK-norm)."""
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(2, 3, 4, 16, generator=g), 1 + 0.1 * torch.randn(16, generator=g)
    check_close(learner.rms_norm(x, w), reference(x, w), "rms_norm(x [2, 3, 4, 16])", atol=1e-5)
