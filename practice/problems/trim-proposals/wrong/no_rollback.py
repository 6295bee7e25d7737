"""Wrong: leaves the accepted proposals in the matcher, which then runs ahead of the output.

Caught by: test_the_example.
"""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    accepted = 0
    for t in proposals:
        if matcher.is_terminated() or not matcher.accept_token(t):
            break
        accepted += 1
    return list(proposals[:accepted])
