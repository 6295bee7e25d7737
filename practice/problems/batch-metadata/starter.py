"""The metadata of one mixed batch: query_start_loc, seq_lens, positions, logits_indices."""


def batch_metadata(
    num_computed: list[int], num_new: list[int], need_logits: list[bool]
) -> dict[str, list[int]]:
    """Per request: tokens already cached, new tokens this step, whether it samples after this
    step."""
    raise NotImplementedError("batch_metadata")
