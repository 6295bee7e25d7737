"""Tests for padded_tokens, padding_waste, pad, pack and unpack: by hand, then random batches of
any
size and length, with the caller's lists left as they were."""

import random

import pytest
from grading import check_equal, check_names, check_raises, fail

CHAPTER_MIX = [2000, 512, 1, 1, 1, 1, 1, 1]


def close(got, want, what):
    if not isinstance(got, (int, float)) or abs(got - want) > 1e-12:
        fail(f"{what} is wrong\n  expected {want!r}\n  got      {got!r}")


def random_lists(rng, n_max=6, len_max=9):
    return [
        [rng.randrange(-50, 1000) for _ in range(rng.randint(1, len_max))]
        for _ in range(rng.randint(1, n_max))
    ]


def test_padded_batch_is_b_times_the_longest(learner):
    """Every request is stretched to the longest: B * max(query_lens), not the sum or the
    mean."""
    check_equal(learner.padded_tokens([3, 1, 2]), 9, "padded_tokens([3, 1, 2])")
    check_equal(learner.padded_tokens(CHAPTER_MIX), 16000, "padded_tokens of the chapter's mix")
    check_equal(learner.padded_tokens([7]), 7, "padded_tokens([7])")


def test_chapter_mix_wastes_84_percent(learner):
    """1 - 2518 / 16000: two prefills and six decodes padded to 2000 tokens each."""
    close(
        learner.padding_waste(CHAPTER_MIX),
        1 - 2518 / 16000,
        "padding_waste([2000, 512, 1, 1, 1, 1, 1, 1])",
    )


def test_waste_is_a_fraction_of_the_padded_work(learner):
    """[3, 1] pads to 6 tokens, 2 of them padding: 1/3 (not 6/4 - 1 = 0.5)."""
    close(learner.padding_waste([3, 1]), 1 / 3, "padding_waste([3, 1])")


def test_random_batches_follow_the_formulas(learner):
    """Any number of requests of any lengths: B * max, and 1 - sum / (B * max)."""
    rng = random.Random(0)
    for case in range(40):
        lens = [rng.choice([1, rng.randint(1, 9000)]) for _ in range(rng.randint(1, 12))]
        padded = len(lens) * max(lens)
        check_equal(learner.padded_tokens(lens), padded, f"case {case}: padded_tokens({lens})")
        close(
            learner.padding_waste(lens),
            1 - sum(lens) / padded,
            f"case {case}: padding_waste({lens})",
        )


def test_equal_lengths_waste_nothing(learner):
    """A batch of decodes, all of length 1, is already a rectangle (and so is any batch of equal
    lengths)."""
    close(learner.padding_waste([1, 1, 1, 1]), 0.0, "padding_waste([1, 1, 1, 1])")
    close(learner.padding_waste([37, 37]), 0.0, "padding_waste([37, 37])")


@pytest.mark.parametrize("lens, bad", [([], "[]"), ([3, 0], 0), ([0], 0), ([5, -2, 4], -2)])
def test_empty_batches_and_requests_raise_value_error_naming_them(learner, lens, bad):
    """There is no waste of nothing: refuse an empty batch and requests without tokens, naming
    what is wrong."""
    for name in ("padded_tokens", "padding_waste"):
        error = check_raises(ValueError, getattr(learner, name), lens, what=f"{name}({lens})")
        check_names(error, bad, f"{name}({lens})")


def test_pad_fills_on_the_right(learner):
    """Each row keeps its tokens first, then pad_id up to the longest length."""
    check_equal(
        learner.pad([[5, 6, 7], [8], [9, 10]], -1),
        [[5, 6, 7], [8, -1, -1], [9, 10, -1]],
        "pad([[5, 6, 7], [8], [9, 10]], -1)",
    )
    check_equal(
        learner.pad([[4], [1, 2, 3, 4, 5]], 99),
        [[4, 99, 99, 99, 99], [1, 2, 3, 4, 5]],
        "pad([[4], [1..5]], 99)",
    )


def test_pack_lays_tokens_end_to_end(learner):
    """flat = the tokens back to back; query_start_loc = 0 and the running sum of the
    lengths."""
    check_equal(
        learner.pack([[5, 6, 7], [8], [9, 10]]),
        ([5, 6, 7, 8, 9, 10], [0, 3, 4, 6]),
        "pack([[5, 6, 7], [8], [9, 10]])",
    )


def test_random_batches_pad_pack_and_unpack(learner):
    """pad, pack and unpack for any batch, with any pad id; unpack(pack(x)) == x."""
    rng = random.Random(1)
    for case in range(30):
        lists, pad_id = random_lists(rng), rng.randrange(-5, 5)
        width = max(map(len, lists))
        check_equal(
            learner.pad(lists, pad_id),
            [t + [pad_id] * (width - len(t)) for t in lists],
            f"case {case}: pad({lists}, {pad_id})",
        )
        flat, starts = [t for tokens in lists for t in tokens], [0]
        for tokens in lists:
            starts.append(starts[-1] + len(tokens))
        check_equal(learner.pack(lists), (flat, starts), f"case {case}: pack({lists})")
        check_equal(
            learner.unpack(flat, starts), lists, f"case {case}: unpack({flat}, {starts})"
        )


def least_padded(lens, k):
    """The least padded work of `lens` in k buckets: runs of neighbours in sorted order."""
    lens, inf = sorted(lens), float("inf")
    best = [0] + [inf] * len(lens)
    for _ in range(k):
        best = [inf] + [
            min(best[i] + (j - i) * lens[j - 1] for i in range(j))
            for j in range(1, len(lens) + 1)
        ]
    return best[-1]


def test_fewest_buckets_counts_the_total_waste(learner):
    """[10, 100, 1, 90, 9] at 10%: {1, 9, 10} and {90, 100} pad 230 positions for 210 tokens
    (8.7%), though the short bucket alone wastes a third: the limit is on the total."""
    check_equal(
        learner.fewest_buckets([10, 100, 1, 90, 9], 0.10), 2, "fewest_buckets(..., 0.10)"
    )
    check_equal(
        learner.fewest_buckets([10, 100, 1, 90, 9], 0.05), 3, "fewest_buckets(..., 0.05)"
    )


def test_fewest_buckets_ignores_the_arrival_order(learner):
    """A bucket is any set of requests, not a run of the batch as it came: [90, 1, 100, 9, 10]
    needs 2 buckets at 10% too."""
    check_equal(
        learner.fewest_buckets([90, 1, 100, 9, 10], 0.10), 2, "fewest_buckets(..., 0.10)"
    )


def test_no_waste_needs_a_bucket_per_distinct_length(learner):
    """At 0%, every distinct length gets its own bucket; equal lengths need one."""
    check_equal(
        learner.fewest_buckets([3, 1, 2, 3, 1], 0.0), 3, "fewest_buckets([3,1,2,3,1], 0)"
    )
    check_equal(learner.fewest_buckets([7, 7, 7], 0.0), 1, "fewest_buckets([7, 7, 7], 0)")


def test_random_batches_get_the_fewest_buckets(learner):
    """Any batch and limit: k buckets suffice when the best k-bucket split is under the limit,
    and k - 1 do not."""
    rng = random.Random(2)
    for case in range(60):
        lens = [rng.choice([1, rng.randint(1, 3000)]) for _ in range(rng.randint(1, 10))]
        limit = rng.choice([0.0, 0.02, 0.1, 0.25, 0.5, 0.8])
        real = sum(lens)
        want = next(
            k
            for k in range(1, len(lens) + 1)
            if 1 - real / least_padded(lens, k) <= limit + 1e-12
        )
        check_equal(
            learner.fewest_buckets(list(lens), limit),
            want,
            f"case {case}: fewest_buckets({lens}, {limit})",
        )


@pytest.mark.parametrize("limit", [-0.1, 1.0, 1.5])
def test_a_waste_limit_outside_0_1_raises_value_error(learner, limit):
    """A limit below 0 or at 1 and above is not a fraction of the padded work."""
    error = check_raises(
        ValueError,
        learner.fewest_buckets,
        [3, 1],
        limit,
        what=f"fewest_buckets([3, 1], {limit})",
    )
    check_names(error, limit, f"fewest_buckets([3, 1], {limit})")
