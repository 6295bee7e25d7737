"""Wrong: the length error does not say which request is at fault (only the formula, with a "1"
in
it).

Caught by: test_lengths_that_do_not_fit_are_rejected.
"""


def greedy_verify(target_argmax: list[list[int]], draft: list[list[int]]) -> list[list[int]]:
    """Per request: the longest prefix of draft[r] equal to target_argmax[r], then
    target_argmax[r] after it."""
    if len(target_argmax) != len(draft):
        raise ValueError(
            f"{len(target_argmax)} rows of target argmax but {len(draft)} rows of proposals: "
            "expected one of each per request"
        )
    out = []
    for r, (target, proposed) in enumerate(zip(target_argmax, draft)):
        if len(target) != len(proposed) + 1:
            raise ValueError(
                f"{len(target)} target tokens for {len(proposed)} proposals: "
                "expected len(draft[r]) + 1"
            )
        a = 0
        while a < len(proposed) and proposed[a] == target[a]:
            a += 1
        out.append(
            list(target[: a + 1])
        )  # the accepted proposals equal the target's tokens, then one more
    return out
