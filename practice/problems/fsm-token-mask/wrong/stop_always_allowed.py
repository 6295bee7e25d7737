"""Wrong: allows the stop token in every state.

Caught by: test_the_example.
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
        raise ValueError(
            f"stop_token is {stop_token}: expected a token id in [0, {len(tokens)})"
        )
    mask = [
        i != stop_token and text != "" and advance(transitions, state, text) is not None
        for i, text in enumerate(tokens)
    ]
    mask[stop_token] = True
    return mask
