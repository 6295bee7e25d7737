"""Wrong: keeps the first refused proposal too (one past the accepted prefix).

Caught by: test_the_example.
"""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    accepted = 0
    for t in proposals:
        if matcher.is_terminated() or not matcher.accept_token(t):
            break
        accepted += 1
    if accepted:
        matcher.rollback(accepted)
    return list(proposals[: accepted + 1])
