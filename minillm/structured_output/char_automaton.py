"""structured_output/char_automaton.py — the token mask of a small character automaton.

Chapter 12 states the rules and imports this helper without showing it; the exercise
fsm-token-mask computes every state's mask in one walk over a trie of the tokens. The automaton
is given by `step(state, char) -> state or None` (None is the dead state) and its set of
accepting states; tokens by their strings.
"""

from __future__ import annotations

import torch


def token_mask(
    step, accepting, state, token_strings: list[str], stop_token: int
) -> torch.Tensor:
    """[V] booleans: the tokens allowed in `state` (V = len(token_strings))."""
    mask = torch.zeros(len(token_strings), dtype=torch.bool)
    for tid, text in enumerate(token_strings):
        if not text or tid == stop_token:
            continue
        s = state
        for ch in text:
            s = step(s, ch)
            if s is None:
                break
        mask[tid] = s is not None
    mask[stop_token] = state in accepting
    return mask
