"""Greedy verification: the accepted proposals of each request, then the target's own next
token."""


def greedy_verify(target_argmax: list[list[int]], draft: list[list[int]]) -> list[list[int]]:
    """Per request: the longest prefix of draft[r] equal to target_argmax[r], then
    target_argmax[r] after it."""
    raise NotImplementedError("greedy_verify")
