"""Wrong: allows a token only if the text is complete after it.

Caught by: test_the_example.
"""


def all_masks(step, accepting: set, states: list, tokens: list[str], stop_token: int) -> dict:
    """{state: mask} for every state of states: True for each token whose characters all run
    from that state; the stop token where the state is accepting; an empty token never. Each
    character of the trie of the tokens is stepped once per state still alive at its parent."""
    if not 0 <= stop_token < len(tokens):
        raise ValueError(
            f"stop_token is {stop_token}: expected a token id in [0, {len(tokens)})"
        )
    # the trie: node = {"ids": token ids ending here, "next": {char: node}}
    root = {"ids": [], "next": {}}
    for i, text in enumerate(tokens):
        if i == stop_token or text == "":
            continue  # the stop token's string is ignored; an empty token is never allowed
        node = root
        for ch in text:
            node = node["next"].setdefault(ch, {"ids": [], "next": {}})
        node["ids"].append(i)

    masks = {s: [False] * len(tokens) for s in states}
    # depth first; alive holds (start state, current state) for the starts still alive here
    stack = [(root, [(s, s) for s in states])]
    while stack:
        node, alive = stack.pop()
        for i in node["ids"]:
            for start, cur in alive:
                masks[start][i] = cur in accepting
        for ch, child in node["next"].items():
            after = []
            for start, cur in alive:
                nxt = step(cur, ch)  # one call per live start per trie edge
                if nxt is not None:
                    after.append((start, nxt))
            if after:  # no live start: the whole subtree is refused without stepping it
                stack.append((child, after))
    for s in states:
        masks[s][stop_token] = s in accepting
    return masks
