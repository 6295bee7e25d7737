"""Tests for attention_forward, against minillm.model.Attention with random weights."""

import pytest
import torch

from grading import check_close, check_shape
from minillm.model import Attention, ModelConfig, rope_cos_sin


def make_attention(hidden=32, heads=4, kv_heads=2, head_dim=8, seed=0):
    cfg = ModelConfig(vocab_size=16, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim)
    attn = Attention(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in attn.named_parameters():
            if "norm" in name:  # QK-norm weights far from 1, so leaving them out shows
                p.copy_(0.3 + 2.5 * torch.rand(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return attn, cfg


def inputs(cfg, B, T, seed=1):
    x = torch.randn(B, T, cfg.hidden_size, generator=torch.Generator().manual_seed(seed))
    cos, sin = rope_cos_sin(torch.arange(T), cfg.head_dim, 10_000.0)
    return x, cos[:, None, :], sin[:, None, :]


def run(learner, attn, cfg, x, cos, sin):
    with torch.no_grad():
        return learner.attention_forward(attn, x, cos, sin, cfg.num_attention_heads, cfg.num_key_value_heads)


def reference(attn, x, cos, sin):
    with torch.no_grad():
        return attn(x, cos, sin)


def test_output_has_the_input_shape(learner):
    """Merge the heads back ([B, T, heads * head_dim]) and apply attn.o_proj: the output is [B, T, hidden]."""
    attn, cfg = make_attention(hidden=24)  # hidden != heads * head_dim, as in Qwen3
    x, cos, sin = inputs(cfg, 2, 5)
    check_shape(run(learner, attn, cfg, x, cos, sin), (2, 5, 24), "attention_forward(x [2, 5, 24])")


def test_single_head_matches_minillm(learner):
    """softmax(q k^T / sqrt(head_dim)) v with a causal mask, after QK-norm and RoPE."""
    attn, cfg = make_attention(heads=1, kv_heads=1, head_dim=32)
    x, cos, sin = inputs(cfg, 1, 6)
    check_close(run(learner, attn, cfg, x, cos, sin), reference(attn, x, cos, sin),
                "attention_forward with one head", atol=1e-5)


def test_query_heads_share_kv_heads_in_consecutive_groups(learner):
    """KV head j serves query heads j*group .. j*group+group-1: use repeat_interleave, not repeat."""
    attn, cfg = make_attention(hidden=32, heads=4, kv_heads=2, head_dim=8)
    with torch.no_grad():
        attn.o_proj.weight.copy_(torch.eye(32))  # the output is then the heads side by side
    x, cos, sin = inputs(cfg, 1, 5)
    got, expected = run(learner, attn, cfg, x, cos, sin), reference(attn, x, cos, sin)
    check_shape(got, expected.shape, "attention_forward(x [1, 5, 32])")
    for h in range(4):
        part = slice(8 * h, 8 * h + 8)
        check_close(got[..., part], expected[..., part],
                    f"the output of query head {h} (it should use KV head {h // 2})", atol=1e-5)


def test_qk_norm_normalises_each_head_before_rope(learner):
    """Apply attn.q_norm / attn.k_norm to q and k viewed as [B, T, heads, head_dim], then rotate."""
    attn, cfg = make_attention(heads=2, kv_heads=2, head_dim=16, seed=3)
    x, cos, sin = inputs(cfg, 1, 4, seed=4)
    x = x * 10  # large activations: only a per-head norm brings q and k back to the same scale
    check_close(run(learner, attn, cfg, x, cos, sin), reference(attn, x, cos, sin),
                "attention_forward with QK-norm weights far from 1", atol=1e-4)


def test_future_tokens_do_not_change_the_past(learner):
    """Mask the scores of keys after the query (upper triangle) with -inf before the softmax."""
    attn, cfg = make_attention()
    x, cos, sin = inputs(cfg, 1, 6)
    before = run(learner, attn, cfg, x, cos, sin)
    changed = x.clone()
    changed[:, 3:] += 5.0  # new tokens at positions 3..5
    after = run(learner, attn, cfg, changed, cos, sin)
    check_close(after[:, :3], before[:, :3], "the outputs at positions 0..2 after changing tokens 3..5", atol=1e-5)


@pytest.mark.parametrize("B, T", [(2, 7), (3, 1)])
def test_matches_minillm_attention(learner, B, T):
    """Everything together: projections, QK-norm, RoPE, GQA, the causal mask, the scale and o_proj."""
    attn, cfg = make_attention(hidden=48, heads=4, kv_heads=2, head_dim=16, seed=5)
    x, cos, sin = inputs(cfg, B, T, seed=6)
    check_close(run(learner, attn, cfg, x, cos, sin), reference(attn, x, cos, sin),
                f"attention_forward(x [{B}, {T}, 48])", atol=1e-5)
