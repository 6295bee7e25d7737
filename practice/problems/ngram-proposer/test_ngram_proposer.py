"""Tests for ngram_propose: the example, the rules one by one, random contexts (vocabulary
sizes, lengths, k,
lookup windows) against a brute-force oracle, the context left unchanged, and errors by
message."""

import copy
import random

from grading import check_equal, check_raises


def oracle(context, k, lo, hi):
    """Every (n, start) pair, best first: longest n, then earliest start."""
    L = len(context)
    best = None
    for n in range(lo, hi + 1):
        for s in range(L - n):
            if n <= L - 1 and context[s : s + n] == context[L - n :]:
                if best is None or (n, -s) > (best[0], -best[1]):
                    best = (n, s)
    return [] if best is None else context[best[1] + best[0] : best[1] + best[0] + k]


def test_the_example(learner):
    """The four calls of the task."""
    check_equal(
        learner.ngram_propose([1, 2, 3, 9, 1, 2], 3, 1, 3),
        [3, 9, 1],
        "ngram_propose([1, 2, 3, 9, 1, 2], 3, 1, 3)",
    )
    check_equal(
        learner.ngram_propose([5, 1, 7, 1, 8, 1], 2, 1, 1),
        [7, 1],
        "ngram_propose([5, 1, 7, 1, 8, 1], 2, 1, 1)",
    )
    check_equal(learner.ngram_propose([7, 7], 4, 1, 3), [7], "ngram_propose([7, 7], 4, 1, 3)")
    check_equal(
        learner.ngram_propose([1, 2, 3, 4], 2, 1, 3), [], "ngram_propose([1, 2, 3, 4], 2, 1, 3)"
    )


def test_the_longest_suffix_wins(learner):
    """[4, 5, 6] occurred at 2 and is followed by 0; the shorter [6] occurred first at 0,
    followed by 1."""
    ctx = [6, 1, 4, 5, 6, 0, 9, 4, 5, 6]
    check_equal(learner.ngram_propose(ctx, 2, 1, 3), [0, 9], f"ngram_propose({ctx}, 2, 1, 3)")
    check_equal(
        learner.ngram_propose(ctx, 2, 1, 1),
        [1, 4],
        f"ngram_propose({ctx}, 2, 1, 1): only single tokens",
    )


def test_prompt_lookup_min_and_max_bound_the_suffix(learner):
    """Matches shorter than prompt_lookup_min do not count; longer ones than prompt_lookup_max
    are not tried."""
    check_equal(
        learner.ngram_propose([1, 2, 1, 2], 2, 3, 3), [], "ngram_propose([1, 2, 1, 2], 2, 3, 3)"
    )
    ctx = [0, 1, 2, 9, 3, 1, 2, 8, 3, 1, 2]
    check_equal(
        learner.ngram_propose(ctx, 1, 1, 2),
        [9],
        f"ngram_propose({ctx}, 1, 1, 2): [1, 2] first at 1",
    )
    check_equal(
        learner.ngram_propose(ctx, 1, 1, 3),
        [8],
        f"ngram_propose({ctx}, 1, 1, 3): [3, 1, 2] first at 4",
    )


def test_random_contexts_match_the_oracle(learner):
    """Random vocabularies (2 to 1000 tokens, small ones repeat a lot), lengths 0 to 60, k 1 to
    8, windows 1 to 5."""
    rng = random.Random(11)
    for _case in range(200):
        vocab = rng.choice([2, 3, 5, 20, 1000])
        ctx = [rng.randrange(vocab) for _ in range(rng.randint(0, 60))]
        k, lo = rng.randint(1, 8), rng.randint(1, 4)
        hi = rng.randint(lo, 5)
        check_equal(
            learner.ngram_propose(ctx, k, lo, hi),
            oracle(ctx, k, lo, hi),
            f"ngram_propose({ctx}, {k}, {lo}, {hi})",
        )


def test_the_context_is_left_unchanged(learner):
    """The context is the request's tokens: a proposer only reads them."""
    ctx = [1, 2, 3, 1, 2]
    before = copy.deepcopy(ctx)
    learner.ngram_propose(ctx, 3, 1, 3)
    check_equal(ctx, before, "the context after ngram_propose")


def test_bad_arguments_are_rejected_by_name(learner):
    """k, prompt_lookup_min and prompt_lookup_max are checked, and the message names the one at
    fault."""
    for args, name in [
        ((0, 1, 3), "k"),
        ((2, 0, 3), "prompt_lookup_min"),
        ((2, 3, 2), "prompt_lookup_max"),
    ]:
        e = check_raises(
            ValueError,
            learner.ngram_propose,
            [1, 2, 1],
            *args,
            what=f"ngram_propose([1, 2, 1], *{args})",
        )
        check_equal(name in str(e), True, f"whether the message {str(e)!r} names {name}")
