"""spec_decode/oracle.py — what speculation can gain: predicted, and measured for free.

A verify of k proposals, each right with probability alpha independently of the others, keeps
the proposals up to the first wrong one and adds one token of the target's own. The expected
number of tokens it yields is

    1 + alpha + alpha^2 + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)

(k + 1 at alpha = 1). If a verify of k proposals costs `cost_ratio` decodes, speculation is
faster than plain decoding by expected_tokens / cost_ratio, when proposing costs nothing.

`OracleProposer` makes that assumption true: it knows each request's plain greedy continuation
(run beforehand) and proposes it, each token replaced by a wrong one with probability
1 - alpha, at no cost. Sweeping alpha and k with it measures the verify side of speculation
alone; a real proposer's own cost comes on top.
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
