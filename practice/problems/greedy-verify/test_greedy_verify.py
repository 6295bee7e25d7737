"""Tests for greedy_verify: by hand, then random batches (vocabulary sizes, k, acceptance
patterns) against
a per-position oracle; arguments left unchanged; errors that name the request."""

import copy
import random
import re

from grading import check_equal, check_raises


def oracle(target, proposed):
    out = []
    for j, x in enumerate(proposed):
        if x != target[j]:
            return out + [target[j]]
        out.append(x)
    return out + [target[len(proposed)]]


def test_the_example(learner):
    """All accepted plus the bonus; a rejection replaced by the target's token; no proposals at
    all."""
    got = learner.greedy_verify([[4, 5, 6], [1, 2, 3], [8]], [[4, 5], [1, 9], []])
    check_equal(got, [[4, 5, 6], [1, 2], [8]], "greedy_verify of the example")


def test_the_bonus_follows_a_fully_accepted_run(learner):
    """When all k proposals match, the request emits k + 1 tokens: the last is the target's
    argmax after them."""
    check_equal(
        learner.greedy_verify([[3, 3, 3, 3, 7]], [[3, 3, 3, 3]]),
        [[3, 3, 3, 3, 7]],
        "greedy_verify([[3, 3, 3, 3, 7]], [[3, 3, 3, 3]])",
    )


def test_a_later_match_after_a_mismatch_does_not_count(learner):
    """Only a prefix is accepted: once a proposal is wrong, everything after it was built on a
    wrong token."""
    check_equal(
        learner.greedy_verify([[10, 11, 12, 13]], [[99, 11, 12]]),
        [[10]],
        "greedy_verify([[10, 11, 12, 13]], [[99, 11, 12]])",
    )
    check_equal(
        learner.greedy_verify([[10, 11, 12, 13]], [[10, 0, 12]]),
        [[10, 11]],
        "greedy_verify([[10, 11, 12, 13]], [[10, 0, 12]])",
    )


def test_random_batches_match_the_oracle(learner):
    """Random vocabularies (2 to 50,000 tokens), k from 0 to 9 per request, proposals that are
    right with any odds."""
    rng = random.Random(9)
    for case in range(60):
        vocab = rng.choice([2, 3, 17, 1000, 50_000])
        target, draft = [], []
        for _ in range(rng.randint(1, 8)):
            k = rng.randint(0, 9)
            t = [rng.randrange(vocab) for _ in range(k + 1)]
            odds = rng.random()
            draft.append(
                [t[j] if rng.random() < odds else rng.randrange(vocab) for j in range(k)]
            )
            target.append(t)
        want = [oracle(t, d) for t, d in zip(target, draft)]
        check_equal(
            learner.greedy_verify(target, draft),
            want,
            f"random batch {case} (vocabulary {vocab})",
        )


def test_the_arguments_are_left_unchanged(learner):
    """The engine reuses the proposals and the argmax after the call: verification must only
    read them."""
    target, draft = [[1, 2, 3], [4, 5]], [[1, 7], [4]]
    before = copy.deepcopy((target, draft))
    learner.greedy_verify(target, draft)
    check_equal((target, draft), before, "target_argmax and draft after greedy_verify")


def test_lengths_that_do_not_fit_are_rejected(learner):
    """Each request needs one more target token than proposals, and both lists one row per
    request.

    The message names the request at fault by its index and both its lengths (a batch of 12
    to 19 requests, the bad one at index 10 or later, lengths 5 to 9: numbers that cannot be
    in the message by accident)."""
    rng = random.Random(6)
    for case in range(6):
        size = rng.randint(12, 19)
        draft = [[rng.randrange(20) for _ in range(rng.randint(0, 3))] for _ in range(size)]
        target = [[rng.randrange(20) for _ in range(len(d) + 1)] for d in draft]
        bad = rng.randint(10, size - 1)
        n = rng.randint(5, 8)
        m = rng.choice([x for x in range(5, 10) if x not in (n, n + 1)])
        draft[bad] = [rng.randrange(20) for _ in range(n)]
        target[bad] = [rng.randrange(20) for _ in range(m)]
        what = (
            f"case {case}: greedy_verify of {size} requests, request {bad} with {m} target "
            f"tokens for {n} proposals"
        )
        e = check_raises(ValueError, learner.greedy_verify, target, draft, what=what)
        missing = [x for x in (bad, m, n) if not re.search(rf"(?<![0-9]){x}(?![0-9])", str(e))]
        check_equal(
            missing,
            [],
            f"{what}: the numbers its message {str(e)!r} should name, "
            "but does not "
            f"(the request's index {bad}, its {m} target tokens, its {n} proposals)",
        )
    e = check_raises(
        ValueError,
        learner.greedy_verify,
        [[7]] * 11,
        [[]] * 12,
        what="greedy_verify with 11 rows of argmax, 12 of proposals",
    )
    missing = [x for x in (11, 12) if not re.search(rf"(?<![0-9]){x}(?![0-9])", str(e))]
    check_equal(
        missing,
        [],
        f"the numbers of rows (11 and 12) its message {str(e)!r} should name, but does not",
    )
