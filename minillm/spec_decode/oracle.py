"""spec_decode/oracle.py — what speculation can gain: predicted, and measured for free.

A verify of k proposals, each right with probability alpha independently of the others, keeps
the proposals up to the first wrong one and adds one token of the target's own. The expected
number of tokens it yields is

    1 + alpha + alpha^2 + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)

(k + 1 at alpha = 1). If a verify of k proposals costs `cost_ratio` decodes, speculation is
faster than plain decoding by expected_tokens / cost_ratio, when proposing costs nothing.

A real request ends: the engine proposes min(k, remaining - 1) tokens, so that a verify never
emits more than the request may still have, and none when one token is left (that step is a
plain decode). `expected_tokens_cut` takes that cut into account: the expected tokens per
verify over a whole request that needs n more tokens, which is what an engine's mean accepted
length measures, and what a short run falls below E by.

`OracleProposer` makes that assumption true: it knows each request's plain greedy continuation
(run beforehand) and proposes it, each token replaced by a wrong one with probability
1 - alpha, at no cost. Sweeping alpha and k with it measures the verify side of speculation
alone; a real proposer's own cost comes on top. `TimedOracleProposer` puts that cost back: it
runs a draft model's forwards as a draft proposer would, then proposes the oracle's tokens, so a
draft of known cost can be timed at any alpha.
"""

from __future__ import annotations

import random


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per verify of k proposals each accepted with probability alpha."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha is {alpha!r}: expected a probability in [0, 1]")
    if k < 0:
        raise ValueError(f"k is {k!r}: expected an int >= 0")
    return float(k + 1) if alpha == 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_cut(alpha: float, k: int, n: int) -> float:
    """Expected tokens per verify over a request that needs n more tokens, proposals capped at
    min(k, remaining - 1) and no verify when the cap is 0: (n - expected plain decodes) over
    the expected verifies, the ratio an engine's mean accepted length estimates."""
    expected_tokens(alpha, k)  # the same checks of alpha and k
    if n < 1:
        raise ValueError(f"n is {n!r}: expected an int >= 1")
    verifies, decodes = [0.0] * (n + 1), [0.0] * (n + 1)  # expectations for m tokens left
    for m in range(1, n + 1):
        cap = min(k, m - 1)
        if cap == 0:  # one token left (or k = 0): a plain decode
            verifies[m], decodes[m] = verifies[m - 1], decodes[m - 1] + 1.0
            continue
        v, d = 1.0, 0.0
        for j in range(cap + 1):  # j proposals accepted, j + 1 tokens emitted
            p = alpha**j * (1.0 - alpha) if j < cap else alpha**cap
            v, d = v + p * verifies[m - j - 1], d + p * decodes[m - j - 1]
        verifies[m], decodes[m] = v, d
    if verifies[n] == 0.0:
        raise ValueError(f"n is {n} and k is {k}: no verify runs, so no tokens per verify")
    return (n - decodes[n]) / verifies[n]


def wrong(token: int) -> int:
    """A token id that is not `token` and is still in every vocabulary that holds `token`."""
    return token - 1 if token > 0 else token + 1


class OracleProposer:
    """Proposes each request's known greedy continuation, each token corrupted with probability
    1 - alpha (a wrong token is a neighbour of the right one), drawn from a seeded
    generator."""

    writes_kv = False  # a lookup: no forward, no cache slots

    def __init__(self, continuations: dict[tuple[int, ...], list[int]], alpha: float, seed=0):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha is {alpha!r}: expected a probability in [0, 1]")
        self.continuations, self.alpha = continuations, alpha
        self.rng = random.Random(seed)

    def propose(self, seqs, ks: list[int]) -> list[tuple[list[int], None]]:
        out = []
        for s, k in zip(seqs, ks):
            key = tuple(s.prompt_ids)
            if key not in self.continuations:
                raise KeyError(
                    f"no greedy continuation for the {len(key)}-token prompt of "
                    f"{s.request_id}: expected one of the prompts the oracle was given"
                )
            done = len(s.output_ids)
            truth = self.continuations[key][done : done + k]
            # a corrupted proposal is never the right token, so greedy verify always rejects it
            out.append(
                ([t if self.rng.random() < self.alpha else wrong(t) for t in truth], None)
            )
        return out

    def forget(self, request_id: str) -> None:
        pass  # no per-request state


class TimedOracleProposer:
    """A draft's cost with the oracle's proposals: each call runs `draft.propose` (its forwards,
    its K/V writes, as many as a real draft of that acceptance would run) and discards its
    tokens for `oracle.propose`'s. Greedy requests only: the oracle has no probabilities q."""

    writes_kv = True  # the draft's forwards write K/V: slots are reserved before it runs

    def __init__(self, draft, oracle: OracleProposer):
        self.draft, self.oracle = draft, oracle
        self.runner = draft.runner  # the draft's forwards, for a benchmark to count and time

    def propose(self, seqs, ks: list[int]) -> list[tuple[list[int], None]]:
        drafted = self.draft.propose(seqs, ks)
        told = self.oracle.propose(seqs, ks)
        for s, (d, _), (t, _) in zip(seqs, drafted, told):
            if len(d) != len(t):
                raise RuntimeError(
                    f"{s.request_id}: the draft proposed {len(d)} tokens and the oracle "
                    f"{len(t)}: expected the same count"
                )
        return told

    def forget(self, request_id: str) -> None:
        self.draft.forget(request_id)
