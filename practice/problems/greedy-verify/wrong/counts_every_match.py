"""Wrong: accepts every proposal that matches its position, also after a mismatch.

Caught by: test_a_later_match_after_a_mismatch_does_not_count.
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
        kept = [x for j, x in enumerate(proposed) if x == target[j]]
        out.append(kept + [target[len(kept)]])
    return out
