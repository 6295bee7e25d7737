"""Wrong: asks for logits for every request, also for an unfinished prompt chunk.

Caught by: test_logits_at_the_last_token_of_each_sampling_request.
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
    query_start_loc, seq_lens, positions, logits_indices = [0], [], [], []
    for i, (cached, new, sample) in enumerate(zip(num_computed, num_new, need_logits)):
        if new < 1 or cached < 0:
            raise ValueError(
                f"request {i} has num_computed={cached}, num_new={new}: expected >= 0 and >= 1"
            )
        positions.extend(range(cached, cached + new))
        query_start_loc.append(query_start_loc[-1] + new)
        seq_lens.append(cached + new)
        if True:
            logits_indices.append(query_start_loc[-1] - 1)
    return {
        "query_start_loc": query_start_loc,
        "seq_lens": seq_lens,
        "positions": positions,
        "logits_indices": logits_indices,
    }
