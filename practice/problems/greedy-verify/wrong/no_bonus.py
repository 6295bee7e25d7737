"""Wrong: emits only the accepted proposals, never the target's own next token.

Caught by: test_the_example.
"""


def greedy_verify(target_argmax: list[list[int]], draft: list[list[int]]) -> list[list[int]]:
    """Per request: the longest prefix of draft[r] equal to target_argmax[r], then
    target_argmax[r] after it."""
    if len(target_argmax) != len(draft):
        raise ValueError(
            f"{len(target_argmax)} rows of target argmax but {len(draft)} rows of proposals"
        )
    out = []
    for r, (target, proposed) in enumerate(zip(target_argmax, draft)):
        if len(target) != len(proposed) + 1:
            raise ValueError(
                f"request {r} has {len(target)} target tokens for {len(proposed)} proposals"
            )
        a = 0
        while a < len(proposed) and proposed[a] == target[a]:
            a += 1
        out.append(list(proposed[:a]))
    return out
