"""Tests for sliding_window_attention: against a float64 reference written here (one query head
and one position at a time, keys j with j <= i and i - j < window, as Hugging Face's
sliding_window_causal_mask_function), over head groupings from 1 to 8 (powers of two or not),
windows from 1 to past the sequence, and dtypes; against minillm's causal_attention when there
is no window; and which keys each query sees, read off one-hot values."""

from __future__ import annotations

import ast

import pytest
import torch
from grading import check_close, check_equal, check_shape, fail
from judge_plugin import source_under_test

from minillm.model import causal_attention


def reference(q, k, v, window):
    """The definition, in float64: query i of head h reads KV head h // (H // KV) and sees keys
    max(0, i - window + 1) .. i (all of 0 .. i when window is None)."""
    T, H, hd = q.shape
    group = H // k.shape[1]
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros(T, H, hd, dtype=torch.float64)
    for h in range(H):
        kv = h // group
        for i in range(T):
            first = 0 if window is None else max(0, i - window + 1)
            scores = k[first : i + 1, kv] @ q[i, h] / hd**0.5  # [keys]
            out[i, h] = scores.softmax(dim=0) @ v[first : i + 1, kv]
    return out


def minillm_causal(q, k, v):
    """minillm.model.causal_attention on the one sequence (a batch of 1)."""
    return causal_attention(q[None], k[None], v[None], q.shape[-1] ** -0.5)[0]


def make(T, H, KV, hd, seed, dtype=torch.float32, spread=2.0):
    """q, k, v with scores large enough that the softmax is far from uniform."""
    g = torch.Generator().manual_seed(seed)
    q = spread * torch.randn(T, H, hd, generator=g, dtype=torch.float64)
    k = torch.randn(T, KV, hd, generator=g, dtype=torch.float64)
    v = torch.randn(T, KV, hd, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def call(learner, q, k, v, window):
    return learner.sliding_window_attention(q, k, v, window)


def what(q, k, window) -> str:
    T, H, hd = q.shape
    return (
        f"sliding_window_attention(q [{T}, {H}, {hd}], k/v [{T}, {k.shape[1]}, {hd}], "
        f"window={window})"
    )


CASES = [  # T, H, KV, hd, window
    (7, 4, 2, 8, 3),
    (9, 6, 2, 16, 4),  # groups of 3
    (12, 8, 2, 12, 5),  # groups of 4
    (6, 6, 6, 8, 2),  # one KV head per query head
    (10, 10, 2, 10, 7),  # groups of 5
    (5, 3, 1, 24, 2),  # every query head on one KV head
    (1, 4, 2, 8, 1),  # a single token
    (16, 8, 8, 4, 9),
    (20, 4, 1, 8, 19),  # the window misses only the first key of the last query
    (11, 4, 2, 8, None),  # no window: plain causal attention
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_the_reference_for_any_grouping_and_window(learner, case):
    """Causal, the last `window` keys of each query (itself included), query head h on KV head
    h // (H // KV), scores scaled by 1/sqrt(hd)."""
    T, H, KV, hd, window = CASES[case]
    q, k, v = make(T, H, KV, hd, seed=case)
    check_close(
        call(learner, q, k, v, window),
        reference(q, k, v, window),
        what(q, k, window),
        atol=1e-5,
        dtype=torch.float32,
    )


@pytest.mark.parametrize("window", [1, 2, 3, 5, 9, 10, 15, None])
def test_each_query_sees_the_last_window_keys(learner, window):
    """Query i sees key j when j <= i and i - j < window: window 3 gives query 5 the keys 3, 4
    and 5 (Hugging Face's kv_idx > q_idx - sliding_window)."""
    T = 10
    q = torch.zeros(T, 2, T)  # every score is 0: the visible keys share the weight equally
    k = torch.randn(T, 1, T, generator=torch.Generator().manual_seed(3))
    v = torch.eye(T)[:, None, :]  # value j is the one-hot vector of position j
    got = call(learner, q, k, v, window)
    check_shape(got, (T, 2, T), what(q, k, window))
    seen = [[j for j in range(T) if got[i, 0, j] > 1e-6] for i in range(T)]
    expected = [
        [j for j in range(T) if j <= i and (window is None or i - j < window)] for i in range(T)
    ]
    check_equal(
        seen,
        expected,
        f"the keys each query 0..{T - 1} sees with window={window} (row i: the keys of query "
        "i)",
    )


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 2), (8, 2), (6, 3), (8, 4)])
def test_query_heads_share_kv_heads_in_consecutive_groups(learner, heads, kv_heads):
    """KV head j serves query heads j*group .. j*group + group - 1 (group = H // KV): repeat
    each KV head in place, not the whole set of them."""
    T, hd, group, window = 8, 8, heads // kv_heads, 3
    q, k, v = make(T, heads, kv_heads, hd, seed=20 + heads + kv_heads)
    v = v + 10 * torch.arange(kv_heads, dtype=v.dtype)[None, :, None]  # KV heads far apart
    got, expected = call(learner, q, k, v, window), reference(q, k, v, window)
    check_shape(got, expected.shape, what(q, k, window))
    for h in range(heads):
        check_close(
            got[:, h],
            expected[:, h],
            f"the output of query head {h} of {heads} (it should read KV head {h // group} of "
            f"{kv_heads})",
            atol=1e-5,
        )


@pytest.mark.parametrize("hd, heads", [(4, 8), (16, 2), (32, 4)])
def test_scores_are_scaled_by_one_over_sqrt_head_dim(learner, hd, heads):
    """softmax(q . k / sqrt(hd)): hd is the size of one head, not heads * hd, and the square
    root, not hd itself."""
    q, k, v = make(9, heads, 2, hd, seed=40 + hd, spread=3.0)
    check_close(
        call(learner, q, k, v, 4),
        reference(q, k, v, 4),
        what(q, k, 4) + " with large scores",
        atol=1e-5,
    )


@pytest.mark.parametrize("window", [None, 1, 3, 100])
def test_future_keys_do_not_change_the_past(learner, window):
    """The window only removes old keys: a key after the query stays hidden whatever the
    window."""
    q, k, v = make(8, 4, 2, 8, seed=50)
    before = call(learner, q, k, v, window)
    k2, v2 = k.clone(), v.clone()
    k2[4:] += 5.0  # new tokens at positions 4..7
    v2[4:] -= 7.0
    after = call(learner, q, k2, v2, window)
    check_close(
        after[:4],
        before[:4],
        f"the outputs at positions 0..3 after changing the keys and values of tokens 4..7, "
        f"window={window}",
        atol=1e-6,
    )


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 2), (5, 5), (8, 1)])
def test_no_window_is_minillms_causal_attention(learner, heads, kv_heads):
    """window=None is ordinary causal attention with grouped K/V heads: chapter 1's
    causal_attention."""
    q, k, v = make(11, heads, kv_heads, 8, seed=60 + heads)
    check_close(
        call(learner, q, k, v, None), minillm_causal(q, k, v), what(q, k, None), atol=1e-5
    )


@pytest.mark.parametrize("extra", [0, 1, 1000])
def test_a_window_as_long_as_the_sequence_is_plain_causal(learner, extra):
    """With window >= T every query already sees all its past: the same as no window."""
    T = 9
    q, k, v = make(T, 6, 3, 8, seed=70 + extra)
    check_close(
        call(learner, q, k, v, T + extra),
        minillm_causal(q, k, v),
        what(q, k, T + extra) + ", which should equal causal attention",
        atol=1e-5,
    )


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (3, 1)])
def test_a_window_of_one_sees_only_the_token_itself(learner, heads, kv_heads):
    """window=1: query i sees key i alone (weight 1), so its output is value i of its KV head;
    never hide the diagonal."""
    q, k, v = make(7, heads, kv_heads, 8, seed=80, spread=5.0)
    expected = v.repeat_interleave(heads // kv_heads, dim=1)
    check_close(call(learner, q, k, v, 1), expected, what(q, k, 1), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_returns_qs_shape_and_dtype(learner, dtype):
    """[T, H, hd] in q's dtype: float64 in, float64 out (as exact as the reference)."""
    q, k, v = make(13, 6, 2, 4, seed=90, dtype=dtype)
    atol = 1e-12 if dtype == torch.float64 else 1e-5
    check_close(
        call(learner, q, k, v, 5),
        reference(q, k, v, 5),
        f"{what(q, k, 5)} in {dtype}",
        atol=atol,
        dtype=dtype,
    )


def uses_of_minillm(source: str) -> list[tuple[int, str]]:
    """(line, code) of every import of minillm, and every name or string naming it outside
    docstrings."""
    tree, found = ast.parse(source), []
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hit = any(a.name.split(".")[0] == "minillm" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = (node.module or "").split(".")[0] == "minillm"
        elif isinstance(node, ast.Name):
            hit = node.id == "minillm"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = "minillm" in node.value and id(node) not in docstrings
        else:
            hit = False
        if hit:
            found.append((node.lineno, ast.get_source_segment(source, node) or ""))
    return sorted(set(found))


def test_writes_the_attention_with_torch_alone(learner, request):
    """Write the mask, the grouping and the softmax yourself, with torch: the file may not
    import minillm (causal_attention is chapter 1's answer, not yours)."""
    q, k, v = make(6, 4, 2, 8, seed=99)
    check_close(call(learner, q, k, v, 2), reference(q, k, v, 2), what(q, k, 2), atol=1e-5)
    path, source = source_under_test(request)
    uses = uses_of_minillm(source)
    if uses:
        line, code = uses[0]
        fail(
            f"{path.name} uses minillm (line {line}: {code.splitlines()[0]}): write the "
            "attention with torch alone, not with minillm's causal_attention"
        )
