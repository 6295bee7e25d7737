"""Wrong: divides with / and truncates: floats lose whole tokens for budgets beyond 2**53 bytes.

Caught by: test_random_budgets_hold_whole_tokens.
"""


def kv_bytes_per_token(config: dict, bytes_per_element: int = 2, tp_size: int = 1) -> int:
    """Bytes one token takes in one GPU's KV cache: K and V, in every full-attention layer, for
    the KV heads that GPU holds, head_dim numbers each."""
    layer_types = config.get("layer_types")
    if layer_types is None:
        layers = config["num_hidden_layers"]
    else:
        # a hybrid model: only full-attention layers keep a key and a value per token
        layers = sum(kind == "full_attention" for kind in layer_types)
    # no num_key_value_heads: no GQA, one KV head per query head
    kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    if tp_size < 1 or (kv_heads % tp_size and tp_size % kv_heads):
        raise ValueError(
            f"tp_size is {tp_size}: it must divide the {kv_heads} KV heads or be a multiple "
            "of them"
        )
    # fewer KV heads than GPUs: each GPU keeps a copy of one head
    kv_heads_per_gpu = max(1, kv_heads // tp_size)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * layers * kv_heads_per_gpu * head_dim * bytes_per_element


def max_cached_tokens(
    config: dict, budget_bytes: int, bytes_per_element: int = 2, tp_size: int = 1
) -> int:
    """How many whole tokens' K and V fit in one GPU's budget_bytes (ValueError for a negative
    budget)."""
    if budget_bytes < 0:
        raise ValueError(f"budget_bytes is {budget_bytes}: expected a size >= 0")
    return int(budget_bytes / kv_bytes_per_token(config, bytes_per_element, tp_size))
