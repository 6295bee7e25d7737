"""Wrong: the right masks, one token at a time from every state: a shared prefix is stepped
again for every token that starts with it.

Caught by: test_one_walk_steps_each_shared_prefix_once.
"""


def all_masks(step, accepting: set, states: list, tokens: list[str], stop_token: int) -> dict:
    """{state: mask} for every state of states: True for each token whose characters all run
    from that state; the stop token where the state is accepting; an empty token never. Each
    character of the trie of the tokens is stepped once per state still alive at its parent."""
    if not 0 <= stop_token < len(tokens):
        raise ValueError(
            f"stop_token is {stop_token}: expected a token id in [0, {len(tokens)})"
        )
    masks = {}
    for s in states:
        mask = []
        for i, text in enumerate(tokens):
            cur = s if text != "" and i != stop_token else None
            for ch in text if cur is not None else "":
                cur = step(cur, ch)
                if cur is None:
                    break
            mask.append(cur is not None)
        mask[stop_token] = s in accepting
        masks[s] = mask
    return masks
