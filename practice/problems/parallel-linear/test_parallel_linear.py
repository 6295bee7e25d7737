"""Tests for the fused QKV column-parallel projection and the tensor-parallel attention block:
the fused shard by hand and at random head counts (KV heads split, and replicated when there
are fewer of them than ranks), the three outputs of the one product, and each rank's attention
output against the unsplit layer with its all-reduces counted. The all-reduce your code calls is
a real one: the grader runs it on tp_size gloo processes of its own."""

import random

import pytest
import torch
import torch.nn.functional as F
from grading import check_close, check_equal, check_names, check_raises, fail, share

from minillm.parallel.collectives import GlooAllReduce


class CountingAllReduce:
    """The grader's all-reduce, shared with your code: each call goes to the gloo ranks and is
    recorded."""

    def __init__(self, ranks: GlooAllReduce):
        self.ranks, self.calls = ranks, []

    def __call__(self, tensors):
        tensors = list(tensors)
        self.calls.append([tuple(t.shape) for t in tensors])
        return self.ranks(tensors)


@pytest.fixture(scope="module")
def gloo():
    """One group of gloo processes per tp size, started when first needed and stopped after the
    module."""
    groups = {}

    def get(size):
        if size not in groups:
            groups[size] = GlooAllReduce(size)
        return share(CountingAllReduce(groups[size]), call=True)

    yield get
    for g in groups.values():
        g.close()


def kv_heads(num_kv, rank, tp):
    """The KV heads rank `rank` holds: a block of them, or one replicated head."""
    if tp <= num_kv:
        return list(range(rank * num_kv // tp, (rank + 1) * num_kv // tp))
    return [rank * num_kv // tp]


def fused_reference(q, k, v, rank, tp, hd):
    per = q.shape[0] // hd // tp
    rows = [h * hd + i for h in kv_heads(k.shape[0] // hd, rank, tp) for i in range(hd)]
    return torch.cat([q[rank * per * hd : (rank + 1) * per * hd], k[rows], v[rows]], 0)


def attention_reference(x, q_w, k_w, v_w, o_w, hd):
    """The unsplit layer: causal attention, query head h reads KV head h * KV // H."""
    tokens, num_heads, num_kv = x.shape[0], q_w.shape[0] // hd, k_w.shape[0] // hd
    q = F.linear(x, q_w).view(tokens, num_heads, hd).transpose(0, 1)
    k = F.linear(x, k_w).view(tokens, num_kv, hd).transpose(0, 1)
    v = F.linear(x, v_w).view(tokens, num_kv, hd).transpose(0, 1)
    k = k.repeat_interleave(num_heads // num_kv, 0)
    v = v.repeat_interleave(num_heads // num_kv, 0)
    scores = (q @ k.transpose(1, 2)) * hd**-0.5
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    attn = F.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v
    return F.linear(attn.transpose(0, 1).reshape(tokens, -1), o_w)


def layer(num_heads, num_kv, hd, hidden, seed):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(num_heads * hd, hidden, generator=g),
        torch.randn(num_kv * hd, hidden, generator=g),
        torch.randn(num_kv * hd, hidden, generator=g),
        torch.randn(hidden, num_heads * hd, generator=g),
    )


# (query heads, KV heads, tp_size): KV heads split, one per rank, and replicated
SHAPES = [
    (4, 2, 2),
    (8, 4, 2),
    (8, 8, 4),
    (6, 3, 3),
    (8, 2, 4),
    (4, 1, 4),
    (12, 2, 4),
    (8, 4, 8),
]


def test_qkv_shard_by_hand(learner):
    """Rank 1 of 2, 4 query heads and 2 KV heads of head_dim 1: q's rows 2, 3, then k's row 1,
    then v's row 1."""
    q = torch.arange(8.0).view(4, 2)
    k, v = 100 + torch.arange(4.0).view(2, 2), 200 + torch.arange(4.0).view(2, 2)
    check_equal(
        learner.qkv_shard(q, k, v, 1, 2, 1).tolist(),
        [[4.0, 5.0], [6.0, 7.0], [102.0, 103.0], [202.0, 203.0]],
        "qkv_shard(q [4, 2], k [2, 2], v [2, 2], rank 1, tp_size 2, head_dim 1)",
    )


def test_qkv_shard_at_random_head_counts(learner):
    """Every rank's fused shard: its query heads' rows of q, then its KV heads' rows of k and v,
    for KV heads split evenly (tp_size up to the number of KV heads)."""
    rng = random.Random(1)
    for case in range(10):
        num_kv = rng.choice([1, 2, 3, 4, 6])
        tp = rng.choice([t for t in (1, 2, 3, 4, 6) if num_kv % t == 0])
        num_heads, hd = num_kv * rng.choice([1, 2, 3]), rng.choice([1, 2, 4])
        q, k, v, _ = layer(num_heads, num_kv, hd, 5, case)
        for r in range(tp):
            check_close(
                learner.qkv_shard(q, k, v, r, tp, hd),
                fused_reference(q, k, v, r, tp, hd),
                f"case {case}: rank {r}'s fused shard, {num_heads} query heads, {num_kv} KV "
                f"heads of {hd}, tp_size {tp}",
            )


def test_fewer_kv_heads_than_ranks_are_replicated(learner):
    """With fewer KV heads than ranks each rank holds one KV head: the one its query heads read,
    so ranks 0 and 1 of 4 hold head 0 and ranks 2 and 3 head 1 of 2."""
    for num_heads, num_kv, tp in [(8, 2, 4), (4, 1, 4), (12, 2, 4), (8, 4, 8), (16, 2, 8)]:
        q, k, v, _ = layer(num_heads, num_kv, 2, 3, num_heads + tp)
        for r in range(tp):
            check_close(
                learner.qkv_shard(q, k, v, r, tp, 2),
                fused_reference(q, k, v, r, tp, 2),
                f"rank {r}'s fused shard with {num_kv} KV heads at tp_size {tp} (it should "
                f"hold KV head {kv_heads(num_kv, r, tp)[0]})",
            )


def test_one_product_splits_into_q_k_v(learner):
    """qkv_parallel_linear: per rank (q, k, v), q of its query heads and k, v of its KV
    heads, whatever the leading dimensions of x."""
    rng = random.Random(2)
    for case, (num_heads, num_kv, tp) in enumerate(SHAPES):
        hd, hidden = rng.choice([2, 3]), 6
        q_w, k_w, v_w, _ = layer(num_heads, num_kv, hd, hidden, 100 + case)
        x = torch.randn(*[rng.randint(1, 3) for _ in range(rng.randint(1, 2))], hidden)
        ranks = learner.qkv_parallel_linear(x, q_w, k_w, v_w, tp, hd)
        check_equal(len(ranks), tp, f"case {case}: how many ranks' (q, k, v) come back")
        for r, qkv in enumerate(ranks):
            check_equal(len(qkv), 3, f"case {case}: rank {r}'s outputs (q, k, v)")
            fused = F.linear(x, fused_reference(q_w, k_w, v_w, r, tp, hd))
            q_size = num_heads // tp * hd
            kv_size = (fused.shape[-1] - q_size) // 2
            want = fused.split([q_size, kv_size, kv_size], -1)
            for name, got, expected in zip("qkv", qkv, want):
                check_close(
                    got,
                    expected,
                    f"case {case}: rank {r}'s {name}, {num_heads} query heads, {num_kv} KV "
                    f"heads of {hd}, tp_size {tp}",
                    atol=1e-4,
                )


def test_attention_equals_the_unsplit_layer_on_every_rank(learner, gloo):
    """Each rank attends with its own heads and multiplies its columns of o_proj; after the
    all-reduce every rank holds the unsplit layer's output, KV heads replicated or not."""
    for case, (num_heads, num_kv, tp) in enumerate(SHAPES):
        if tp == 1 or tp > 4:
            continue
        hd, hidden = 4, 8
        q_w, k_w, v_w, o_w = layer(num_heads, num_kv, hd, hidden, 200 + case)
        x = torch.randn(5, hidden, generator=torch.Generator().manual_seed(case)) / 2
        outs = learner.tensor_parallel_attention(x, q_w, k_w, v_w, o_w, tp, hd, gloo(tp))
        check_equal(len(outs), tp, f"case {case}: how many outputs come back at tp_size {tp}")
        want = attention_reference(x, q_w, k_w, v_w, o_w, hd)
        for r, y in enumerate(outs):
            check_close(
                y,
                want,
                f"case {case}: rank {r}'s output, {num_heads} query heads, {num_kv} KV heads, "
                f"tp_size {tp}",
                atol=1e-3,
            )


def test_the_attention_block_needs_one_all_reduce(learner, gloo):
    """q, k and v are column-parallel and o row-parallel: one all-reduce, of o's partial
    outputs [tokens, hidden], for the whole block."""
    all_reduce = gloo(2)
    q_w, k_w, v_w, o_w = layer(4, 2, 4, 8, 7)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(7))
    learner.tensor_parallel_attention(x, q_w, k_w, v_w, o_w, 2, 4, all_reduce)
    if len(all_reduce.calls) != 1:
        fail(
            f"tensor_parallel_attention called all_reduce {len(all_reduce.calls)} times with "
            f"shapes {all_reduce.calls}: expected once, on o_proj's partial outputs [3, 8]"
        )
    check_equal(all_reduce.calls[0], [(3, 8), (3, 8)], "the shapes of the one all_reduce")


class LocalSum:
    """An all-reduce in the grader's process, for calls that must be refused before any
    reduce."""

    def __call__(self, tensors):
        total = sum(tensors)
        return [total.clone() for _ in tensors]


def test_a_split_that_does_not_fit_is_refused(learner):
    """tp_size must divide the query heads, and it and the KV heads must divide one another:
    every function raises ValueError naming the head count at fault."""
    local_sum = share(LocalSum(), call=True)
    x = torch.randn(2, 4)
    for num_heads, num_kv, tp, named in [(22, 22, 4, 22), (20, 10, 4, 10), (24, 16, 3, 16)]:
        q_w, k_w, v_w, o_w = layer(num_heads, num_kv, 1, 4, 0)
        calls = [
            ("qkv_shard", learner.qkv_shard, (q_w, k_w, v_w, 0, tp, 1)),
            ("qkv_parallel_linear", learner.qkv_parallel_linear, (x, q_w, k_w, v_w, tp, 1)),
            (
                "tensor_parallel_attention",
                learner.tensor_parallel_attention,
                (x, q_w, k_w, v_w, o_w, tp, 1, local_sum),
            ),
        ]
        for name, fn, args in calls:
            what = f"{name} with {num_heads} query heads, {num_kv} KV heads at tp_size {tp}"
            e = check_raises(ValueError, fn, *args, what=what)
            check_names(e, named, what)
