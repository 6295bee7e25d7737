"""Tests for partial_attention, merge_partials and chunked_attention in log-sum-exp form:
against softmax attention over all keys, on random shapes and every split, N pieces in any
order, huge scores, rows whose keys are all masked, and bad chunk sizes."""

import random

import torch
from grading import check_close, check_names, check_raises


def full(q, k, v, scale, mask=None):
    """(o, lse) of softmax attention over the keys each row sees, in float64."""
    s = q.double() @ k.double().T * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, -1) @ v.double()).float(), torch.logsumexp(s, -1).float()


def tensors(seed, Q, n, d, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(Q, d, generator=g) * spread,
        torch.randn(n, d, generator=g) * spread,
        torch.randn(n, d, generator=g),
    )


def pieces(learner, q, k, v, scale, cuts):
    """partial_attention over keys cuts[i] .. cuts[i + 1]."""
    return [learner.partial_attention(q, k[a:b], v[a:b], scale) for a, b in zip(cuts, cuts[1:])]


def test_partial_attention_returns_output_and_lse(learner):
    q, k, v = tensors(0, 3, 7, 8)
    o, lse = learner.partial_attention(q, k, v, 0.4)
    want_o, want_lse = full(q, k, v, 0.4)
    check_close(o, want_o, "o of partial_attention(q [3, 8], k, v [7, 8], 0.4)")
    check_close(lse, want_lse, "lse (= m + log l = logsumexp of the scores)", rtol=1e-5)


def test_merging_two_halves_equals_the_whole(learner):
    """The example of the task: keys 0..3 and 4..9 merged."""
    q, k, v = tensors(1, 2, 10, 8)
    o, lse = learner.merge_partials(pieces(learner, q, k, v, 0.35, [0, 4, 10]))
    want_o, want_lse = full(q, k, v, 0.35)
    check_close(o, want_o, "o of merge_partials([keys 0..3, keys 4..9])")
    check_close(lse, want_lse, "lse of the merge", rtol=1e-5)


def test_an_n_way_merge_equals_the_whole_in_any_order(learner):
    q, k, v = tensors(2, 4, 23, 16, spread=3.0)
    parts = pieces(learner, q, k, v, 0.5, [0, 2, 9, 10, 17, 23])  # 5 pieces of unequal size
    want_o, want_lse = full(q, k, v, 0.5)
    for order in [(0, 1, 2, 3, 4), (4, 2, 0, 3, 1), (3, 4, 1, 0, 2)]:
        o, lse = learner.merge_partials([parts[i] for i in order])
        check_close(o, want_o, f"o of merge_partials of 5 pieces in the order {order}")
        check_close(lse, want_lse, f"lse of the 5-way merge in the order {order}", rtol=1e-5)
    for n, end in [(1, 2), (3, 10)]:
        o, lse = learner.merge_partials(parts[:n])
        want_o, want_lse = full(q, k[:end], v[:end], 0.5)
        check_close(
            o, want_o, f"o of merge_partials of the first {n} piece(s), keys 0..{end - 1}"
        )
        check_close(
            lse, want_lse, f"lse of merge_partials of the first {n} piece(s)", rtol=1e-5
        )


def test_a_mask_hides_keys_and_a_row_that_sees_none_is_zero_and_minus_inf(learner):
    """Row 0 sees keys 1 and 4, row 1 sees all, row 2 sees none (a fully masked tile)."""
    q, k, v = tensors(3, 3, 6, 8)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[0] = torch.tensor([False, True, False, False, True, False])
    mask[2] = False
    o, lse = learner.partial_attention(q, k, v, 0.5, mask)
    want_o, want_lse = full(q, k, v, 0.5, mask)
    check_close(o[:2], want_o[:2], "o of the rows that see some keys")
    check_close(lse[:2], want_lse[:2], "lse of the rows that see some keys", rtol=1e-5)
    check_close(o[2], torch.zeros(8), "o of row 2, whose keys are all masked (expected zeros)")
    check_close(
        lse[2:],
        torch.full((1,), float("-inf")),
        "lse of row 2, whose keys are all masked (l = 0)",
    )


def test_merging_an_empty_piece_changes_nothing_and_makes_no_nan(learner):
    q, k, v = tensors(4, 3, 12, 8, spread=2.0)
    seen = learner.partial_attention(q, k[:5], v[:5], 0.5)
    nothing = torch.zeros(3, 7, dtype=torch.bool)  # a tile every row of which is masked
    empty = learner.partial_attention(q, k[5:], v[5:], 0.5, nothing)
    for parts, name in [
        ([seen, empty], "[piece, empty]"),
        ([empty, seen, empty], "[empty, piece, empty]"),
    ]:
        o, lse = learner.merge_partials(parts)
        check_close(o, seen[0], f"o of merge_partials({name})")
        check_close(lse, seen[1], f"lse of merge_partials({name})", rtol=1e-6)
    o, lse = learner.merge_partials([empty, empty])
    check_close(o, torch.zeros(3, 8), "o of merge_partials([empty, empty]) (expected zeros)")
    check_close(lse, torch.full((3,), float("-inf")), "lse of merge_partials([empty, empty])")


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
    """Scores in the thousands: exp overflows unless each piece, and the merge, subtracts a
    maximum first."""
    q, k, v = tensors(5, 3, 12, 8, spread=30.0)
    want_o, want_lse = full(q, k, v, 1.0)
    check_close(
        learner.partial_attention(q, k, v, 1.0)[1],
        want_lse,
        "lse of partial_attention with scores of several thousand",
        rtol=1e-5,
    )
    for chunk in (1, 4):
        check_close(
            learner.chunked_attention(q, k, v, 1.0, chunk),
            want_o,
            f"chunked_attention with scores of several thousand, chunk={chunk}",
            atol=1e-5,
        )


def test_a_chunk_below_one_is_refused_by_name(learner):
    q, k, v = tensors(6, 1, 4, 4)
    for chunk in (0, -2):
        error = check_raises(
            ValueError, learner.chunked_attention, q, k, v, 1.0, chunk, what=f"chunk={chunk}"
        )
        check_names(error, chunk, f"the error for chunk={chunk}")
