"""The token masks of every state of a character automaton, in one walk over a trie of the
vocabulary."""


def all_masks(step, accepting: set, states: list, tokens: list[str], stop_token: int) -> dict:
    """{state: mask} for every state of states: True for each token whose characters all run
    from that state; the stop token where the state is accepting; an empty token never. Each
    character of the trie of the tokens is stepped once per state still alive at its parent."""
    raise NotImplementedError("all_masks")
