"""Tests for padded_tokens, padding_waste, pad, pack and unpack, with values worked out by hand."""

import random

from grading import check_equal, check_raises, fail

CHAPTER_MIX = [2000, 512, 1, 1, 1, 1, 1, 1]


def close(got, want, what):
    if not isinstance(got, (int, float)) or abs(got - want) > 1e-9:
        fail(f"{what} is wrong\n  expected {want!r}\n  got      {got!r}")


def test_padded_batch_is_b_times_the_longest(learner):
    """Every request is stretched to the longest: B * max(query_lens), not the sum or the mean."""
    check_equal(learner.padded_tokens([3, 1, 2]), 9, "padded_tokens([3, 1, 2])")
    check_equal(learner.padded_tokens(CHAPTER_MIX), 16000, "padded_tokens of the chapter's mix")


def test_chapter_mix_wastes_84_percent(learner):
    """1 - 2518 / 16000: two prefills and six decodes padded to 2000 tokens each."""
    close(learner.padding_waste(CHAPTER_MIX), 1 - 2518 / 16000, "padding_waste([2000, 512, 1, 1, 1, 1, 1, 1])")


def test_waste_is_a_fraction_of_the_padded_work(learner):
    """[3, 1] pads to 6 tokens, 2 of them padding: 1/3 (not 6/4 - 1 = 0.5)."""
    close(learner.padding_waste([3, 1]), 1 / 3, "padding_waste([3, 1])")


def test_equal_lengths_waste_nothing(learner):
    """A batch of decodes, all of length 1, is already a rectangle."""
    close(learner.padding_waste([1, 1, 1, 1]), 0.0, "padding_waste([1, 1, 1, 1])")


def test_empty_batches_and_empty_requests_raise_value_error(learner):
    """There is no waste of nothing: refuse an empty batch and requests with no tokens."""
    check_raises(ValueError, learner.padding_waste, [], what="padding_waste([])")
    check_raises(ValueError, learner.padded_tokens, [], what="padded_tokens([])")
    check_raises(ValueError, learner.padding_waste, [3, 0], what="padding_waste([3, 0])")


def test_pad_fills_on_the_right(learner):
    """Each row keeps its tokens first, then pad_id up to the longest length."""
    check_equal(learner.pad([[5, 6, 7], [8], [9, 10]], -1), [[5, 6, 7], [8, -1, -1], [9, 10, -1]],
                "pad([[5, 6, 7], [8], [9, 10]], -1)")


def test_pack_lays_tokens_end_to_end(learner):
    """flat = the tokens back to back; query_start_loc = 0 and the running sum of the lengths."""
    check_equal(learner.pack([[5, 6, 7], [8], [9, 10]]), ([5, 6, 7, 8, 9, 10], [0, 3, 4, 6]),
                "pack([[5, 6, 7], [8], [9, 10]])")


def test_unpack_undoes_pack(learner):
    """Request i is flat[query_start_loc[i] : query_start_loc[i + 1]]."""
    rng = random.Random(0)
    for case in range(50):
        lists = [[rng.randrange(100) for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 5))]
        flat = [t for tokens in lists for t in tokens]
        starts = [0]
        for tokens in lists:
            starts.append(starts[-1] + len(tokens))
        check_equal(learner.unpack(flat, starts), lists, f"case {case}: unpack({flat}, {starts})")
