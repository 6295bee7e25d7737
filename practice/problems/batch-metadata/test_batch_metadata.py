"""Tests for batch_metadata: the chapter's worked cases, then random mixes of any size against
the
definitions, and errors that name the request's bad value."""

import random

import pytest
from grading import check_equal, check_names, check_raises, fail

FIELDS = ["query_start_loc", "seq_lens", "positions", "logits_indices"]


def metadata(num_computed, num_new, need_logits):
    """The definitions, one request at a time."""
    out = {"query_start_loc": [0], "seq_lens": [], "positions": [], "logits_indices": []}
    for cached, new, sample in zip(num_computed, num_new, need_logits):
        out["positions"] += range(cached, cached + new)
        out["query_start_loc"].append(out["query_start_loc"][-1] + new)
        out["seq_lens"].append(cached + new)
        if sample:
            out["logits_indices"].append(out["query_start_loc"][-1] - 1)
    return out


def field(learner, name, *args):
    got = learner.batch_metadata(*args)
    if not isinstance(got, dict) or name not in got:
        fail(f"batch_metadata should return a dict with the keys {FIELDS}; got {got!r}")
    return got[name]


EXERCISE = (
    [30, 0, 16],
    [1, 6, 4],
    [True, True, False],
)  # decode after 30, prompt of 6, chunk 16..19 of 40


def test_query_start_loc_is_a_running_sum_from_zero(learner):
    """B + 1 entries: 0, then the running sum of num_new."""
    check_equal(
        field(learner, "query_start_loc", *EXERCISE),
        [0, 1, 7, 11],
        "query_start_loc of the chapter's exercise",
    )


def test_seq_lens_count_cached_and_new_tokens(learner):
    """The context after this step: num_computed + num_new (not num_new alone)."""
    check_equal(
        field(learner, "seq_lens", *EXERCISE), [31, 6, 20], "seq_lens of the chapter's exercise"
    )


def test_positions_continue_after_the_cached_tokens(learner):
    """A decode after 30 cached tokens is at position 30; a chunk after 16 starts at 16,
    not 0."""
    check_equal(
        field(learner, "positions", *EXERCISE),
        [30, 0, 1, 2, 3, 4, 5, 16, 17, 18, 19],
        "positions of the chapter's exercise",
    )


def test_logits_at_the_last_token_of_each_sampling_request(learner):
    """Row query_start_loc[i+1] - 1 for each request that samples; none for an unfinished prompt
    chunk."""
    check_equal(
        field(learner, "logits_indices", *EXERCISE),
        [0, 6],
        "logits_indices of the chapter's exercise",
    )


def test_chapter_example_layout(learner):
    """Prefill of 7, decode after 5, chunk of 12 after 10, all sampling."""
    got = learner.batch_metadata([0, 5, 10], [7, 1, 12], [True, True, True])
    check_equal(
        got,
        metadata([0, 5, 10], [7, 1, 12], [True, True, True]),
        "batch_metadata of the chapter's example",
    )


def test_a_step_where_nobody_samples(learner):
    """Every request is a prompt chunk that does not finish: logits_indices is empty."""
    check_equal(
        field(learner, "logits_indices", [0, 64], [32, 32], [False, False]),
        [],
        "logits_indices when no request samples",
    )


@pytest.mark.parametrize("seed", range(3))
def test_random_mixes_follow_the_definitions(learner, seed):
    """Any number of requests, any mix of prefills, decodes and chunks, contexts into the
    thousands."""
    rng = random.Random(seed)
    for case in range(40):
        B = rng.randint(1, 9)
        cached = [
            rng.choice([0, rng.randint(0, 40), rng.randint(1000, 5000)]) for _ in range(B)
        ]
        new = [rng.choice([1, rng.randint(1, 12)]) for _ in range(B)]
        sample = [rng.random() < 0.6 for _ in range(B)]
        check_equal(
            learner.batch_metadata(cached, new, sample),
            metadata(cached, new, sample),
            f"seed {seed}, case {case}: batch_metadata({cached}, {new}, {sample})",
        )


def test_lists_of_different_lengths_raise_value_error(learner):
    """One entry per request in each of the three lists: whichever list is longer or shorter
    than
    the other two, ValueError (zip would silently drop what does not pair up). Compare all three
    lengths."""
    rng = random.Random(3)
    for case in range(12):
        n = rng.randint(1, 6)
        lists = [
            [rng.randint(0, 9) for _ in range(n)],
            [rng.randint(1, 5) for _ in range(n)],
            [rng.random() < 0.5 for _ in range(n)],
        ]
        odd = case % 3  # num_computed, num_new, need_logits in turn
        if n > 1 and case % 2:
            del lists[odd][rng.randrange(n) :]  # shorter
        else:
            lists[odd] += lists[odd][:1] * rng.randint(1, 2)  # longer
        check_raises(
            ValueError,
            learner.batch_metadata,
            *lists,
            what=f"batch_metadata({lists[0]}, {lists[1]}, {lists[2]}): lists of lengths "
            f"{', '.join(str(len(x)) for x in lists)}",
        )


@pytest.mark.parametrize(
    "num_computed, num_new, bad",
    [([3, 5], [2, 0], 0), ([3, 5, 1], [2, 4, -3], -3), ([0, -7], [1, 1], -7)],
)
def test_a_bad_request_raises_value_error_naming_its_value(learner, num_computed, num_new, bad):
    """A request with no new token, or a negative num_computed, wherever it is in the batch:
    name the bad value."""
    what = f"batch_metadata({num_computed}, {num_new}, ...)"
    error = check_raises(
        ValueError,
        learner.batch_metadata,
        num_computed,
        num_new,
        [True] * len(num_new),
        what=what,
    )
    check_names(error, bad, what)
