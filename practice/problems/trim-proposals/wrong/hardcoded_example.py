"""Wrong: returns the example's answers, whatever the grammar.

Caught by: test_the_stop_token_is_kept_and_nothing_after.
"""


def trim_proposals(matcher, proposals: list[int]) -> list[int]:
    return {(8, 5, 9): [8], (8, 9, 0, 4): [8, 9, 0]}.get(tuple(proposals), [])
