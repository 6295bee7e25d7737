"""Tests for partial_attention, merge_partials and chunked_attention: against softmax attention
over all
keys, on random shapes and every split, with huge scores, in either merge order, and bad
chunk sizes."""

import random

import torch
from grading import check_close, check_names, check_raises


def full(q, k, v, scale):
    s = q.double() @ k.double().T * scale
    return (
        (torch.softmax(s, -1) @ v.double()).float(),
        s.max(-1).values.float(),
        torch.exp(s - s.max(-1).values[:, None]).sum(-1).float(),
    )


def tensors(seed, Q, n, d, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(Q, d, generator=g) * spread,
        torch.randn(n, d, generator=g) * spread,
        torch.randn(n, d, generator=g),
    )


def test_partial_attention_returns_output_max_and_sum(learner):
    q, k, v = tensors(0, 3, 7, 8)
    o, m, l = learner.partial_attention(q, k, v, 0.4)
    want_o, want_m, want_l = full(q, k, v, 0.4)
    check_close(o, want_o, "o of partial_attention(q [3, 8], k, v [7, 8], 0.4)")
    check_close(m, want_m, "m (the row max of the scores)")
    check_close(l, want_l, "l (the sum of exp(score - m))", rtol=1e-5)


def test_merging_two_halves_equals_the_whole(learner):
    """The example of the task: keys 0..3 and 4..9 merged."""
    q, k, v = tensors(1, 2, 10, 8)
    o, m, l = learner.merge_partials(
        learner.partial_attention(q, k[:4], v[:4], 0.35),
        learner.partial_attention(q, k[4:], v[4:], 0.35),
    )
    want_o, want_m, want_l = full(q, k, v, 0.35)
    check_close(o, want_o, "o of merge_partials(keys 0..3, keys 4..9)")
    check_close(m, want_m, "m of the merge")
    check_close(l, want_l, "l of the merge", rtol=1e-5)


def test_merging_in_either_order_gives_the_same_result(learner):
    q, k, v = tensors(2, 4, 9, 16, spread=3.0)
    a, b = (
        learner.partial_attention(q, k[:2], v[:2], 0.5),
        learner.partial_attention(q, k[2:], v[2:], 0.5),
    )
    ab, ba = learner.merge_partials(a, b), learner.merge_partials(b, a)
    want = full(q, k, v, 0.5)[0]
    check_close(ab[0], want, "merge_partials(a, b)")
    check_close(ba[0], want, "merge_partials(b, a)")


def test_chunked_attention_equals_softmax_attention_for_any_chunk(learner):
    rng = random.Random(11)
    for case in range(12):
        Q, n, d = rng.randint(1, 5), rng.randint(1, 40), rng.choice([4, 8, 16, 24])
        chunk = rng.choice([1, 2, 3, 5, 8, n, n + 3])
        q, k, v = tensors(100 + case, Q, n, d, spread=rng.choice([0.5, 1.0, 4.0]))
        check_close(
            learner.chunked_attention(q, k, v, d**-0.5, chunk),
            full(q, k, v, d**-0.5)[0],
            f"chunked_attention(q [{Q}, {d}], {n} keys, chunk={chunk})",
            atol=1e-5,
        )


def test_huge_scores_stay_finite(learner):
    """Scores in the thousands: exp overflows unless each piece subtracts its maximum first."""
    q, k, v = tensors(3, 3, 12, 8, spread=30.0)
    check_close(
        learner.chunked_attention(q, k, v, 1.0, 4),
        full(q, k, v, 1.0)[0],
        "chunked_attention with scores of several thousand, chunk=4",
        atol=1e-5,
    )


def test_a_chunk_below_one_is_refused_by_name(learner):
    q, k, v = tensors(4, 1, 4, 4)
    for chunk in (0, -2):
        error = check_raises(
            ValueError, learner.chunked_attention, q, k, v, 1.0, chunk, what=f"chunk={chunk}"
        )
        check_names(error, chunk, f"the error for chunk={chunk}")
