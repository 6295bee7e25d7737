"""KV cache arithmetic from a Hugging Face config dict, per GPU under tensor parallelism."""


def kv_bytes_per_token(config: dict, bytes_per_element: int = 2, tp_size: int = 1) -> int:
    """Bytes one token takes in one GPU's KV cache: K and V, in every full-attention layer, for
    the KV heads that GPU holds, head_dim numbers each."""
    raise NotImplementedError("kv_bytes_per_token")


def max_cached_tokens(
    config: dict, budget_bytes: int, bytes_per_element: int = 2, tp_size: int = 1
) -> int:
    """How many whole tokens' K and V fit in one GPU's budget_bytes (ValueError for a negative
    budget)."""
    raise NotImplementedError("max_cached_tokens")
