"""The longest prefix of speculative proposals that a request's grammar accepts."""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    """The prefix of proposals the matcher accepts one after another (up to and including a
    token that ends the grammar); the matcher left where it was."""
    raise NotImplementedError("trim_proposals")
