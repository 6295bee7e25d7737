"""Wrong: never asks whether the grammar has ended, so it calls accept_token on a terminated
matcher (xgrammar refuses it, with an error in its log).

Caught by: test_the_example.
"""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    accepted = 0
    for t in proposals:
        if not matcher.accept_token(t):
            break
        accepted += 1
    if accepted:
        matcher.rollback(accepted)
    return list(proposals[:accepted])
