"""Wrong: rolls back as many tokens as were proposed, not as many as were accepted.

Caught by: test_the_example.
"""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    accepted = 0
    for t in proposals:
        if matcher.is_terminated() or not matcher.accept_token(t):
            break
        accepted += 1
    matcher.rollback(len(proposals))
    return list(proposals[:accepted])
