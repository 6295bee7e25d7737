"""Tests for all_masks: the example, the stop token's rules, random automata and vocabularies
against a reader who checks one token at a time, and a count of the automaton's steps through an
instrumented automaton: one walk over the trie steps fewer characters than the token-by-token
loop."""

import copy
import random

from grading import check_equal, check_raises, fail, share


class Counting:
    """The automaton of a dict transitions[(state, char)]: counts its calls and the calls made
    on the dead state (None), which no walk should make."""

    def __init__(self, transitions: dict):
        self.transitions, self.calls, self.dead_calls = transitions, 0, 0

    def __call__(self, state, ch):
        self.calls += 1
        if state is None:
            self.dead_calls += 1
            return None
        return self.transitions.get((state, ch))


def run(learner, T, acc, states, tokens, stop):
    """learner.all_masks through a fresh counting automaton; (masks, the automaton)."""
    step = Counting(T)
    masks = learner.all_masks(share(step, call=True), acc, states, tokens, stop)
    if step.dead_calls:
        fail(f"step was called {step.dead_calls} times on the dead state None; stop at None")
    return masks, step


def example():
    T = {("start", "-"): "sign"}
    for s in ("start", "sign", "digits"):
        for d in "012":
            T[(s, d)] = "digits"
    return (
        T,
        {"digits"},
        ["start", "sign", "digits"],
        ["-", "1", "12", "-1", "1-", "a", "", "<eos>"],
    )


def test_the_example(learner):
    """From start: the sign, digits and "-1"; from sign: digits; from digits: digits and the
    stop token."""
    T, acc, states, tokens = example()
    masks, _ = run(learner, T, acc, states, tokens, 7)
    check_equal(
        masks,
        {
            "start": [True, True, True, True, False, False, False, False],
            "sign": [False, True, True, False, False, False, False, False],
            "digits": [False, True, True, False, False, False, False, True],
        },
        "all_masks of the example",
    )


def test_stop_token_only_where_the_text_is_complete(learner):
    """The stop token's string is ignored: only whether the state is accepting counts."""
    T, acc, states, tokens = example()
    # token 1 ("1") as the stop token: refused in start (not accepting), though "1" would run
    masks, _ = run(learner, T, acc, states, tokens, 1)
    check_equal(masks["start"][1], False, "stop id 1 in start")
    # token 5 ("a") as the stop token: allowed in digits (accepting), though "a" would not run
    masks, _ = run(learner, T, acc, states, tokens, 5)
    check_equal(masks["digits"][5], True, "stop id 5 in digits")
    check_equal(masks["sign"][5], False, "stop id 5 in sign")


def token_by_token(T, acc, states, tokens, stop):
    """The masks, one token at a time, and the steps that takes (each token stepped until it
    dies)."""
    masks, steps = {}, 0
    for state in states:
        out = []
        for i, text in enumerate(tokens):
            if i == stop:
                out.append(state in acc)
                continue
            s, ok = state, text != ""
            for ch in text:
                steps += 1
                s = T.get((s, ch))
                if s is None:
                    ok = False
                    break
            out.append(ok)
        masks[state] = out
    return masks, steps


def trie_steps(T, states, tokens):
    """The steps of one walk over the trie of every non-empty token string: each edge stepped
    once for each start state still alive at its parent."""
    steps = 0
    for state in states:
        alive = {"": state}  # prefix -> its state from this start, for live prefixes
        for prefix in sorted({t[:n] for t in tokens for n in range(1, len(t) + 1)}, key=len):
            parent = alive.get(prefix[:-1])
            if parent is None:
                continue  # dead at the parent: the edge is never stepped
            steps += 1
            nxt = T.get((parent, prefix[-1]))
            if nxt is not None:
                alive[prefix] = nxt
    return steps


def random_case(rng, n_tokens=30):
    states = list(range(rng.randint(1, 5)))
    T = {(s, c): rng.choice(states) for s in states for c in "abc" if rng.random() < 0.6}
    acc = {s for s in states if rng.random() < 0.5}
    tokens = [
        "".join(rng.choice("abc") for _ in range(rng.randint(0, 4))) for _ in range(n_tokens)
    ]
    return T, acc, states, tokens, rng.randrange(len(tokens))


def test_masks_equal_the_token_by_token_masks(learner):
    """Random DFAs over "abc", random tokens of 0 to 4 characters (repeats, prefixes of one
    another), every state."""
    rng = random.Random(12)
    for case in range(25):
        T, acc, states, tokens, stop = random_case(rng)
        args = (copy.deepcopy(T), set(acc), list(states), list(tokens), stop)
        masks, _ = run(learner, *args)
        expected, _ = token_by_token(T, acc, states, tokens, stop)
        check_equal(masks, expected, f"all_masks of random case {case}")
        check_equal(args, (T, acc, states, tokens, stop), "the arguments after the call")


def test_one_walk_steps_each_shared_prefix_once(learner):
    """Tokens that share a prefix share its steps: the walk makes at most as many step calls as
    one walk over the trie, fewer than stepping every token from every state."""
    rng = random.Random(3)
    cases = [example() + (7,)]
    # every string of 1 to 4 characters over "ab", shuffled: long shared prefixes
    words = [format(n, "b")[1:].replace("0", "a").replace("1", "b") for n in range(2, 32)]
    for _ in range(3):
        T, acc, states, _, _ = random_case(rng)
        tokens = list(words)
        rng.shuffle(tokens)
        cases.append((T, acc, states, tokens + ["<eos>"], len(tokens)))
    for case, (T, acc, states, tokens, stop) in enumerate(cases):
        masks, step = run(learner, T, acc, states, tokens, stop)
        expected, loop = token_by_token(T, acc, states, tokens, stop)
        check_equal(masks, expected, f"all_masks of case {case}")
        walk = trie_steps(T, states, tokens)
        assert walk < loop  # the test's own cases leave room between the two
        if step.calls > walk:
            fail(
                f"case {case}: {step.calls} step calls; one walk over the trie of the tokens "
                f"takes {walk}, and the token-by-token loop {loop}. Step each trie edge once "
                "per start state still alive at its parent"
            )


def test_bad_stop_token_names_it(learner):
    T, acc, states, tokens = example()
    err = check_raises(
        ValueError,
        learner.all_masks,
        share(Counting(T), call=True),
        acc,
        states,
        tokens,
        8,
        what="stop_token 8 of 8",
    )
    if "8" not in str(err):
        fail(f"the error should name the stop token 8 and the 8 tokens; it says {err}")
