"""Wrong: returns the example's masks whatever the automaton and tokens.

Caught by: test_random_automata_and_vocabularies.
"""


def advance(transitions: dict, state, text: str):
    """The state after every character of text, or None once a character has no transition."""
    for ch in text:
        state = transitions.get((state, ch))
        if state is None:
            return None
    return state


def token_mask(transitions: dict, accepting: set, state, tokens: list[str], stop_token: int):
    """True for each token whose characters all run from state; the stop token where state is
    accepting; an empty token never."""
    if not 0 <= stop_token < len(tokens):
        raise ValueError(f"stop_token is {stop_token}: expected an id in [0, {len(tokens)})")
    if state == "digits":
        return [False, True, True, False, False, False, False, True]
    if state == "sign":
        return [False, True, True, False, False, False, False, False]
    mask = [True, True, True, True, False, False, False, False]
    if stop_token == 1:
        mask[1] = False
    return mask
