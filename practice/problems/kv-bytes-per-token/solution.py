"""KV cache arithmetic from a Hugging Face config dict."""


def kv_bytes_per_token(config: dict, bytes_per_element: int = 2) -> int:
    """Bytes one token takes in the KV cache: K and V, every layer, every KV head, head_dim
    numbers each."""
    # no num_key_value_heads: no GQA, one KV head per query head
    kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * bytes_per_element


def max_cached_tokens(config: dict, budget_bytes: int, bytes_per_element: int = 2) -> int:
    """How many whole tokens' K and V fit in budget_bytes (ValueError for a negative budget)."""
    if budget_bytes < 0:
        raise ValueError(f"budget_bytes is {budget_bytes}: expected a size >= 0")
    return budget_bytes // kv_bytes_per_token(config, bytes_per_element)
