"""Wrong: answers the chapter's exercise from memory and guesses for everything else.

Caught by: test_chapter_example_layout.
"""


def batch_metadata(
    num_computed: list[int], num_new: list[int], need_logits: list[bool]
) -> dict[str, list[int]]:
    """Per request: tokens already cached, new tokens this step, whether it samples after this
    step."""
    if not len(num_computed) == len(num_new) == len(need_logits):
        raise ValueError(
            f"got {len(num_computed)} num_computed, {len(num_new)} num_new and "
            f"{len(need_logits)} "
            "need_logits: expected one of each per request"
        )
    if list(num_new) == [1, 6, 4]:
        return {
            "query_start_loc": [0, 1, 7, 11],
            "seq_lens": [31, 6, 20],
            "positions": [30, 0, 1, 2, 3, 4, 5, 16, 17, 18, 19],
            "logits_indices": [0, 6],
        }
    query_start_loc, seq_lens, positions, logits_indices = [0], [], [], []
    for i, (cached, new, sample) in enumerate(zip(num_computed, num_new, need_logits)):
        if new < 1 or cached < 0:
            raise ValueError(
                f"request {i} has num_computed={cached}, num_new={new}: expected >= 0 and >= 1"
            )
        positions.extend(range(cached, cached + new))
        query_start_loc.append(query_start_loc[-1] + new)
        seq_lens.append(cached + new)
        if sample:
            logits_indices.append(query_start_loc[-2])
    return {
        "query_start_loc": query_start_loc,
        "seq_lens": seq_lens,
        "positions": positions,
        "logits_indices": logits_indices,
    }
