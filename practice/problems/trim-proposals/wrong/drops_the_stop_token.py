"""Wrong: stops before a proposal that ends the grammar instead of keeping it.

Caught by: test_the_example.
"""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    accepted = 0
    for t in proposals:
        if not matcher.accept_token(t):
            break
        if matcher.is_terminated():
            matcher.rollback(1)
            break
        accepted += 1
    if accepted:
        matcher.rollback(accepted)
    return list(proposals[:accepted])
