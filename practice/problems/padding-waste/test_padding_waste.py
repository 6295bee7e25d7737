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
