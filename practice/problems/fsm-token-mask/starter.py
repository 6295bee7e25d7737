"""The token mask of a deterministic character automaton: the tokens allowed in one state."""


def advance(transitions: dict, state, text: str):
    """The state after every character of text, or None once a character has no transition."""
    raise NotImplementedError("advance")


def token_mask(transitions: dict, accepting: set, state, tokens: list[str], stop_token: int):
    """True for each token whose characters all run from state; the stop token where state is
    accepting; an empty token never."""
    raise NotImplementedError("token_mask")
