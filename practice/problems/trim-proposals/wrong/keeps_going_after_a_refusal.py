"""Wrong: skips a refused proposal and checks the next ones, keeping every one accepted; a
verify can only use a prefix.

Caught by: test_the_example.
"""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    kept = []
    for t in proposals:
        if not matcher.is_terminated() and matcher.accept_token(t):
            kept.append(t)
    if kept:
        matcher.rollback(len(kept))
    return kept
