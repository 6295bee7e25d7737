"""The longest prefix of speculative proposals that a request's grammar accepts."""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    """The prefix of proposals the matcher accepts one after another (up to and including a
    token that ends the grammar); the matcher left where it was."""
    accepted = 0
    for t in proposals:
        if matcher.is_terminated() or not matcher.accept_token(t):
            break
        accepted += 1
    if accepted:
        matcher.rollback(accepted)  # proposals are not output tokens yet
    return list(proposals[:accepted])
