"""Wrong: counts the query heads: grouped-query attention stores only the KV heads.

Caught by: test_qwen3_06b_costs_112_kib_per_token.
"""


def kv_bytes_per_token(config: dict, bytes_per_element: int = 2) -> int:
    """Bytes one token takes in the KV cache: K and V, every layer, every KV head, head_dim
    numbers each."""
    kv_heads = config["num_attention_heads"]  # absent: no GQA
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * bytes_per_element


def max_cached_tokens(config: dict, budget_bytes: int, bytes_per_element: int = 2) -> int:
    """How many whole tokens' K and V fit in budget_bytes (ValueError for a negative budget)."""
    if budget_bytes < 0:
        raise ValueError(f"budget_bytes is {budget_bytes}: expected a size >= 0")
    return budget_bytes // kv_bytes_per_token(config, bytes_per_element)
