"""Tests for batch_metadata: the chapter's worked cases, then random mixes against minillm.runner.build_batch."""

import random

from grading import check_equal, check_raises, fail
from minillm.runner import build_batch

FIELDS = ["query_start_loc", "seq_lens", "positions", "logits_indices"]


def field(learner, name, *args):
    got = learner.batch_metadata(*args)
    if not isinstance(got, dict) or name not in got:
        fail(f"batch_metadata should return a dict with the keys {FIELDS}; got {got!r}")
    return got[name]


EXERCISE = ([30, 0, 16], [1, 6, 4], [True, True, False])  # decode after 30, prompt of 6, chunk 16..19 of 40


def test_query_start_loc_is_a_running_sum_from_zero(learner):
    """B + 1 entries: 0, then the running sum of num_new."""
    check_equal(field(learner, "query_start_loc", *EXERCISE), [0, 1, 7, 11], "query_start_loc of the chapter's exercise")


def test_seq_lens_count_cached_and_new_tokens(learner):
    """The context after this step: num_computed + num_new (not num_new alone)."""
    check_equal(field(learner, "seq_lens", *EXERCISE), [31, 6, 20], "seq_lens of the chapter's exercise")


def test_positions_continue_after_the_cached_tokens(learner):
    """A decode after 30 cached tokens is at position 30; a chunk after 16 starts at 16, not 0."""
    check_equal(field(learner, "positions", *EXERCISE), [30, 0, 1, 2, 3, 4, 5, 16, 17, 18, 19],
                "positions of the chapter's exercise")


def test_logits_at_the_last_token_of_each_sampling_request(learner):
    """Row query_start_loc[i+1] - 1 for each request that samples; none for an unfinished prompt chunk."""
    check_equal(field(learner, "logits_indices", *EXERCISE), [0, 6], "logits_indices of the chapter's exercise")


def test_chapter_example_layout(learner):
    """Prefill of 7, decode after 5, chunk of 12 after 10, all sampling."""
    got = learner.batch_metadata([0, 5, 10], [7, 1, 12], [True, True, True])
    check_equal([got.get(f) for f in FIELDS[:2]] + [got.get("logits_indices")],
                [[0, 7, 8, 20], [7, 6, 22], [6, 7, 19]], "[query_start_loc, seq_lens, logits_indices]")
    check_equal(got.get("positions"), list(range(7)) + [5] + list(range(10, 22)), "positions")


def test_random_mixes_match_build_batch(learner):
    """Any mix of prefills, decodes and chunks, compared with minillm.runner.build_batch."""
    rng = random.Random(0)
    for case in range(150):
        B = rng.randint(1, 6)
        cached = [rng.choice([0, rng.randint(0, 40)]) for _ in range(B)]
        new = [rng.choice([1, rng.randint(1, 12)]) for _ in range(B)]
        sample = [rng.random() < 0.7 for _ in range(B)]
        items = [([1] * n, c, list(range(64)), s) for c, n, s in zip(cached, new, sample)]
        ref = build_batch(items, block_size=16)
        want = {"query_start_loc": ref.query_start_loc, "seq_lens": ref.seq_lens,
                "positions": ref.positions.tolist(), "logits_indices": ref.logits_indices.tolist()}
        got = learner.batch_metadata(cached, new, sample)
        for name in FIELDS:
            check_equal(got.get(name) if isinstance(got, dict) else got, want[name],
                        f"case {case}: {name} for num_computed={cached}, num_new={new}, need_logits={sample}")


def test_inconsistent_input_raises_value_error(learner):
    """Lists of different lengths, a request with 0 new tokens, or negative num_computed."""
    check_raises(ValueError, learner.batch_metadata, [0, 1], [1], [True, True], what="lists of lengths 2, 1, 2")
    check_raises(ValueError, learner.batch_metadata, [3], [0], [True], what="a request with num_new=0")
    check_raises(ValueError, learner.batch_metadata, [-1], [2], [True], what="a request with num_computed=-1")
