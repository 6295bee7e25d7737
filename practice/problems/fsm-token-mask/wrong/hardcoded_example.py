"""Wrong: returns the example's masks whatever the automaton and tokens.

Caught by: test_masks_equal_the_token_by_token_masks.
"""


def all_masks(step, accepting: set, states: list, tokens: list[str], stop_token: int) -> dict:
    """{state: mask} for every state of states: True for each token whose characters all run
    from that state; the stop token where the state is accepting; an empty token never. Each
    character of the trie of the tokens is stepped once per state still alive at its parent."""
    if not 0 <= stop_token < len(tokens):
        raise ValueError(
            f"stop_token is {stop_token}: expected a token id in [0, {len(tokens)})"
        )
    example = {
        "start": [True, True, True, True, False, False, False, False],
        "sign": [False, True, True, False, False, False, False, False],
        "digits": [False, True, True, False, False, False, False, True],
    }
    masks = {s: list(example.get(s, example["digits"])) for s in states}
    if stop_token == 1 and "start" in masks:
        masks["start"][1] = False
    if stop_token == 5 and "digits" in masks:
        masks["digits"][5] = True
    return masks
