"""Tests for attention_forward: against a reference built from the block's own layers and
PyTorch's
scaled_dot_product_attention, over head groupings from 1 to 8 (powers of two or not), head sizes
unrelated to the hidden size, batches and lengths; and the block's layers are counted as they
run."""

import pytest
import torch
import torch.nn.functional as F
from grading import check_close, check_equal, check_shape, fail

from minillm.model import Attention, ModelConfig, apply_rope, rope_cos_sin


def make_attention(hidden, heads, kv_heads, head_dim, seed=0):
    cfg = ModelConfig(
        vocab_size=16,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
    )
    attn = Attention(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in attn.named_parameters():
            if "norm" in name:  # QK-norm weights far from 1, so leaving them out shows
                p.copy_(0.3 + 2.5 * torch.rand(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return attn


def tables(T, head_dim, theta):
    cos, sin = rope_cos_sin(torch.arange(T), head_dim, theta)
    return cos[:, None, :], sin[:, None, :]


@torch.no_grad()
def reference(attn, x, cos, sin, heads, kv_heads):
    B, T, _ = x.shape
    q = attn.q_proj(x).view(B, T, heads, -1)
    hd = q.shape[-1]
    k, v = attn.k_proj(x).view(B, T, kv_heads, hd), attn.v_proj(x).view(B, T, kv_heads, hd)
    q, k = apply_rope(attn.q_norm(q), cos, sin), apply_rope(attn.k_norm(k), cos, sin)
    k, v = (t.repeat_interleave(heads // kv_heads, dim=2) for t in (k, v))
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
    )
    return attn.o_proj(o.transpose(1, 2).reshape(B, T, heads * hd))


def run(learner, attn, x, cos, sin, heads, kv_heads):
    return learner.attention_forward(attn, x, cos, sin, heads, kv_heads)


CONFIGS = [  # hidden, heads, kv_heads, head_dim, B, T, theta
    (32, 4, 2, 8, 2, 7, 10_000.0),
    (24, 4, 2, 8, 1, 5, 1e6),  # hidden != heads * head_dim, as in Qwen3
    (48, 6, 2, 16, 2, 6, 500.0),  # groups of 3
    (40, 8, 2, 12, 1, 9, 1e6),  # groups of 4
    (36, 6, 6, 8, 2, 4, 10_000.0),  # one KV head per query head
    (64, 10, 2, 10, 1, 3, 1e6),  # groups of 5
    (
        20,
        3,
        1,
        24,
        3,
        1,
        10_000.0,
    ),  # one KV head for all, a single token, head_dim > hidden / heads
    (16, 8, 8, 4, 1, 12, 100.0),
]


@pytest.mark.parametrize("case", range(len(CONFIGS)))
def test_matches_the_reference_for_any_grouping(learner, case):
    """Projections, QK-norm, RoPE, grouped-query causal attention scaled by 1/sqrt(head_dim),
    then o_proj."""
    hidden, heads, kv_heads, head_dim, B, T, theta = CONFIGS[case]
    attn = make_attention(hidden, heads, kv_heads, head_dim, seed=case)
    x = torch.randn(B, T, hidden, generator=torch.Generator().manual_seed(100 + case))
    cos, sin = tables(T, head_dim, theta)
    got = run(learner, attn, x, cos, sin, heads, kv_heads)
    what = (
        f"attention_forward(x [{B}, {T}, {hidden}]) with {heads} query heads, "
        f"{kv_heads} KV heads of {head_dim}"
    )
    check_close(got, reference(attn, x, cos, sin, heads, kv_heads), what, atol=1e-5)


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 2), (8, 2)])
def test_query_heads_share_kv_heads_in_consecutive_groups(learner, heads, kv_heads):
    """KV head j serves query heads j*group .. j*group+group-1: use repeat_interleave, not
    repeat."""
    head_dim, group = 8, heads // kv_heads
    attn = make_attention(heads * head_dim, heads, kv_heads, head_dim, seed=7)
    with torch.no_grad():
        attn.o_proj.weight.copy_(
            torch.eye(heads * head_dim)
        )  # the output is then the heads side by side
    x = torch.randn(1, 5, heads * head_dim, generator=torch.Generator().manual_seed(8))
    cos, sin = tables(5, head_dim, 10_000.0)
    got, expected = (
        run(learner, attn, x, cos, sin, heads, kv_heads),
        reference(attn, x, cos, sin, heads, kv_heads),
    )
    check_shape(got, expected.shape, f"attention_forward(x {list(x.shape)})")
    for h in range(heads):
        part = slice(head_dim * h, head_dim * (h + 1))
        check_close(
            got[..., part],
            expected[..., part],
            f"the output of query head {h} of {heads} (it should use KV head {h // group})",
            atol=1e-5,
        )


def test_qk_norm_normalises_each_head_before_rope(learner):
    """Apply attn.q_norm / attn.k_norm to q and k viewed as [B, T, heads, head_dim], then
    rotate."""
    attn = make_attention(32, 2, 2, 16, seed=3)
    x = 10 * torch.randn(
        1, 4, 32, generator=torch.Generator().manual_seed(4)
    )  # only a per-head norm rescales this
    cos, sin = tables(4, 16, 10_000.0)
    check_close(
        run(learner, attn, x, cos, sin, 2, 2),
        reference(attn, x, cos, sin, 2, 2),
        "attention_forward with QK-norm weights far from 1",
        atol=1e-4,
    )


def test_future_tokens_do_not_change_the_past(learner):
    """Mask the scores of keys after the query (upper triangle) with -inf before the softmax."""
    attn = make_attention(32, 4, 2, 8)
    x = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(5))
    cos, sin = tables(6, 8, 10_000.0)
    before = run(learner, attn, x, cos, sin, 4, 2)
    changed = x.clone()
    changed[:, 3:] += 5.0  # new tokens at positions 3..5
    after = run(learner, attn, changed, cos, sin, 4, 2)
    check_close(
        after[:, :3],
        before[:, :3],
        "the outputs at positions 0..2 after changing tokens 3..5",
        atol=1e-5,
    )


def test_uses_the_blocks_layers_and_writes_the_attention_itself(learner):
    """Call q_proj, k_proj, v_proj, q_norm, k_norm and o_proj; never the block's own forward
    (that is the exercise)."""
    attn = make_attention(24, 4, 2, 8, seed=9)
    calls = {
        name: 0
        for name in (
            "q_proj",
            "k_proj",
            "v_proj",
            "q_norm",
            "k_norm",
            "o_proj",
            "the block itself",
        )
    }
    modules = {
        **{name: getattr(attn, name) for name in list(calls)[:-1]},
        "the block itself": attn,
    }
    hooks = [
        m.register_forward_hook(lambda *_, n=name: calls.__setitem__(n, calls[n] + 1))
        for name, m in modules.items()
    ]
    try:
        x = torch.randn(2, 3, 24, generator=torch.Generator().manual_seed(10))
        cos, sin = tables(3, 8, 10_000.0)
        run(learner, attn, x, cos, sin, 4, 2)
    finally:
        for h in hooks:
            h.remove()
    if calls["the block itself"]:
        fail(
            "attention_forward called the block's own forward (attn(x, cos, sin)): write the "
            "attention yourself"
        )
    check_equal(
        {n: min(c, 1) for n, c in calls.items()},
        {**{n: 1 for n in list(calls)[:-1]}, "the block itself": 0},
        "which of the block's layers ran (1: at least once)",
    )
