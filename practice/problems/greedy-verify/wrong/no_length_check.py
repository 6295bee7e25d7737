"""Wrong: never checks the lengths, so a request with too few target tokens is silently cut
short.

Caught by: test_lengths_that_do_not_fit_are_rejected.
"""


def greedy_verify(target_argmax: list[list[int]], draft: list[list[int]]) -> list[list[int]]:
    """Per request: the longest prefix of draft[r] equal to target_argmax[r], then
    target_argmax[r] after it."""
    out = []
    for target, proposed in zip(target_argmax, draft):
        a = 0
        while a < len(proposed) and a < len(target) and proposed[a] == target[a]:
            a += 1
        out.append(list(target[: a + 1]))
    return out
