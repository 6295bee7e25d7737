"""Wrong: fits the example (8 KV heads of 128, as in Qwen3-0.6B) instead of reading the config.

Caught by: test_missing_fields_fall_back_to_one_kv_head_per_query_head.
"""


def kv_bytes_per_token(config: dict, bytes_per_element: int = 2) -> int:
    """Bytes one token takes in the KV cache: K and V, every layer, every KV head, head_dim
    numbers each."""
    kv_heads = config.get("num_key_value_heads") or 8
    head_dim = config.get("head_dim") or 128
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * bytes_per_element


def max_cached_tokens(config: dict, budget_bytes: int, bytes_per_element: int = 2) -> int:
    """How many whole tokens' K and V fit in budget_bytes (ValueError for a negative budget)."""
    if budget_bytes < 0:
        raise ValueError(f"budget_bytes is {budget_bytes}: expected a size >= 0")
    return budget_bytes // kv_bytes_per_token(config, bytes_per_element)
