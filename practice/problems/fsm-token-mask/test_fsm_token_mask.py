"""Tests for advance and token_mask: the example, then random automata and random vocabularies
against a reader who checks one character at a time; arguments left unchanged."""

import copy
import random

from grading import check_equal, check_raises


def example():
    T = {("start", "-"): "sign"}
    for s in ("start", "sign", "digits"):
        for d in "012":
            T[(s, d)] = "digits"
    return T, {"digits"}, ["-", "1", "12", "-1", "1-", "a", "", "<eos>"]


def test_the_example(learner):
    """From start: the sign, digits and "-1"; from digits: digits and the stop token."""
    T, acc, tokens = example()
    check_equal(
        learner.token_mask(T, acc, "start", tokens, 7),
        [True, True, True, True, False, False, False, False],
        "token_mask(start)",
    )
    check_equal(
        learner.token_mask(T, acc, "digits", tokens, 7),
        [False, True, True, False, False, False, False, True],
        "token_mask(digits)",
    )


def test_advance_runs_every_character(learner):
    """A token whose later character has no transition leads to the dead state (None)."""
    T, _, _ = example()
    check_equal(learner.advance(T, "start", "-12"), "digits", 'advance(start, "-12")')
    check_equal(learner.advance(T, "start", "1-"), None, 'advance(start, "1-")')
    check_equal(learner.advance(T, "sign", ""), "sign", 'advance(sign, "")')


def test_stop_token_only_where_the_text_is_complete(learner):
    """The stop token's string is ignored: only whether the state is accepting counts."""
    T, acc, tokens = example()
    check_equal(learner.token_mask(T, acc, "sign", tokens, 7)[7], False, "the stop after '-'")
    # token 1 ("1") as the stop token: refused in start (not accepting), though "1" would run
    check_equal(learner.token_mask(T, acc, "start", tokens, 1)[1], False, "stop id 1 in start")
    # token 5 ("a") as the stop token: allowed in digits (accepting), though "a" would not run
    check_equal(learner.token_mask(T, acc, "digits", tokens, 5)[5], True, "stop id 5 in digits")


def oracle(T, acc, state, tokens, stop):
    out = []
    for i, text in enumerate(tokens):
        if i == stop:
            out.append(state in acc)
            continue
        s, ok = state, text != ""
        for ch in text:
            s = T.get((s, ch))
            if s is None:
                ok = False
                break
        out.append(ok)
    return out


def test_random_automata_and_vocabularies(learner):
    """Random DFAs over "abc", random tokens of 0 to 4 characters, every state."""
    rng = random.Random(12)
    for _ in range(40):
        states = list(range(rng.randint(1, 5)))
        T = {(s, c): rng.choice(states) for s in states for c in "abc" if rng.random() < 0.6}
        acc = {s for s in states if rng.random() < 0.5}
        tokens = [
            "".join(rng.choice("abc") for _ in range(rng.randint(0, 4))) for _ in range(30)
        ]
        stop = rng.randrange(len(tokens))
        for s in states:
            args = (copy.deepcopy(T), set(acc), s, list(tokens), stop)
            got = learner.token_mask(*args)
            check_equal(got, oracle(T, acc, s, tokens, stop), f"token_mask in state {s}")
            check_equal(args, (T, acc, s, tokens, stop), "the arguments after the call")


def test_bad_stop_token_names_it(learner):
    T, acc, tokens = example()
    err = check_raises(
        ValueError, learner.token_mask, T, acc, "start", tokens, 8, what="stop_token 8 of 8"
    )
    if "8" not in str(err):
        from grading import fail

        fail(f"the error should name the stop token 8 and the 8 tokens; it says {err}")
