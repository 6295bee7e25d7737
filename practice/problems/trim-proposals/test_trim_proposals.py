"""Tests for trim_proposals: the example, the stop token kept and nothing after it, a refused
first proposal, all accepted, and random grammars against a reference; the matcher left where
it was, never asked to accept past the grammar's end, never rolled back past the call."""

import random

from grading import check_equal, fail, share


class FakeMatcher:
    """A grammar given by allowed(history) -> the set of tokens allowed next; `stop` ends it.
    Records misuse: accept_token on a terminated matcher, rollback past the tokens accepted."""

    def __init__(self, allowed, stop: int, history=()):
        self.allowed, self.stop, self.history = allowed, stop, []
        for t in history:
            if not self.accept_token(t):
                raise ValueError(f"the test's history {history} is not in its grammar")
        self.misuse = []

    def accept_token(self, t) -> bool:
        if self.is_terminated():
            self.misuse.append(f"accept_token({t}) on a terminated matcher")
            return False
        if int(t) in self.allowed(tuple(self.history)):
            self.history.append(int(t))
            return True
        return False

    def is_terminated(self) -> bool:
        return bool(self.history) and self.history[-1] == self.stop

    def rollback(self, n) -> None:
        if not 0 <= int(n) <= len(self.history):
            self.misuse.append(f"rollback({n}) with {len(self.history)} tokens accepted")
            return
        del self.history[len(self.history) - int(n) :]


def spelling(target: list[int]):
    """allowed(history): the next token of target while history follows it."""

    def allowed(history):
        n = len(history)
        return {target[n]} if n < len(target) and list(history) == target[:n] else set()

    return allowed


def trim(learner, matcher: FakeMatcher, proposals: list[int]) -> list[int]:
    """learner.trim_proposals; fails when the matcher was misused or not left where it was."""
    before = list(matcher.history)
    got = learner.trim_proposals(
        share(matcher, methods=["accept_token", "is_terminated", "rollback"]), list(proposals)
    )
    if matcher.misuse:
        fail(f"trim_proposals(matcher, {proposals}) misused the matcher: {matcher.misuse[0]}")
    if matcher.history != before:
        fail(
            f"after trim_proposals(matcher, {proposals}) the matcher has accepted "
            f"{matcher.history}; expected {before}, where it was: proposals are not output yet"
        )
    return got


def test_the_example(learner):
    """After [7]: [8, 5, 9] keeps [8], [8, 9, 0, 4] keeps [8, 9, 0]; the matcher stays put."""
    m = FakeMatcher(spelling([7, 8, 9, 0]), stop=0, history=[7])
    check_equal(trim(learner, m, [8, 5, 9]), [8], "trim_proposals after [7] of [8, 5, 9]")
    got = trim(learner, m, [8, 9, 0, 4])
    check_equal(got, [8, 9, 0], "trim_proposals after [7] of [8, 9, 0, 4]")


def test_the_stop_token_is_kept_and_nothing_after(learner):
    """A proposal that ends the grammar is the last one kept; no accept_token after it."""
    m = FakeMatcher(spelling([3, 0]), stop=0)
    check_equal(trim(learner, m, [3, 0, 0, 3]), [3, 0], "trim_proposals of [3, 0, 0, 3]")


def test_a_refused_first_proposal_keeps_nothing(learner):
    """The first proposal refused: nothing kept, nothing to roll back."""
    m = FakeMatcher(spelling([1, 2, 0]), stop=0, history=[1])
    check_equal(trim(learner, m, [5, 2, 0]), [], "trim_proposals after [1] of [5, 2, 0]")
    check_equal(trim(learner, m, []), [], "trim_proposals of no proposals")


def test_all_proposals_accepted(learner):
    """Every proposal allowed and none ends the grammar: all kept."""
    m = FakeMatcher(spelling([4, 5, 6, 7, 0]), stop=0, history=[4])
    check_equal(trim(learner, m, [5, 6, 7]), [5, 6, 7], "trim_proposals after [4] of [5, 6, 7]")


def reference(allowed, stop, history, proposals):
    kept, h = [], list(history)
    for t in proposals:
        if (h and h[-1] == stop) or t not in allowed(tuple(h)):
            break
        kept.append(t)
        h.append(t)
    return kept


def test_random_grammars(learner):
    """Grammars that allow a random set of tokens 0..5 after each history (0 ends them), random
    histories and proposals."""
    for seed in range(40):

        def allowed(history, seed=seed):
            r = random.Random(f"{seed}:{history}")
            return {t for t in range(6) if r.random() < 0.5}

        rng = random.Random(seed)
        history = []
        while len(history) < rng.randint(0, 3):
            options = sorted(allowed(tuple(history)) - {0})
            if not options:
                break
            history.append(rng.choice(options))
        proposals = []
        for _ in range(rng.randint(0, 5)):  # mostly allowed tokens, so the prefixes are long
            h = tuple(history + proposals)
            options = sorted(allowed(h)) if rng.random() < 0.8 else []
            proposals.append(rng.choice(options) if options else rng.randrange(6))
        m = FakeMatcher(allowed, stop=0, history=history)
        got = trim(learner, m, proposals)
        want = reference(allowed, 0, history, proposals)
        check_equal(got, want, f"trim_proposals after {history} of {proposals}")
