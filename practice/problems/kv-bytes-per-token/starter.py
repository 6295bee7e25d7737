"""KV cache arithmetic from a Hugging Face config dict."""


def kv_bytes_per_token(config: dict, bytes_per_element: int = 2) -> int:
    """Bytes one token takes in the KV cache: K and V, every layer, every KV head, head_dim
    numbers each."""
    raise NotImplementedError("kv_bytes_per_token")


def max_cached_tokens(config: dict, budget_bytes: int, bytes_per_element: int = 2) -> int:
    """How many whole tokens' K and V fit in budget_bytes (ValueError for a negative budget)."""
    raise NotImplementedError("max_cached_tokens")
