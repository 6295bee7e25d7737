"""Tests for kv_bytes_per_token and max_cached_tokens: real configs worked out by hand, per GPU
under tensor parallelism and for hybrid models, then random configs (any layers, heads, head
sizes, bytes per number and GPU counts) against the formula."""

import random

from grading import check_equal, check_names, check_raises

GiB = 2**30
QWEN3_06B = {
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 1024,
}
LLAMA2_7B = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "hidden_size": 4096,
}  # no GQA, no head_dim
# Chapter 2's hypothetical hybrid model (section 6): 64 layers, of which
# every fourth uses full attention, 32 KV heads of 128 (16 on each GPU under TP2).
BIG_HYBRID = {
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 32,
    "head_dim": 128,
    "hidden_size": 5120,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
}
BIG_HYBRID["layer_types"] = BIG_HYBRID["layer_types"] * 16


def random_configs(seed, n=60):
    """Configs with every field drawn independently; head_dim given or not, KV heads given, None
    or absent."""
    rng = random.Random(seed)
    for _ in range(n):
        heads = rng.choice([1, 3, 4, 12, 14, 28, 40, 64])
        config = {
            "num_hidden_layers": rng.randint(1, 96),
            "num_attention_heads": heads,
            "hidden_size": heads * rng.choice([32, 64, 80, 128, 160]),
        }
        kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
        choice = rng.choice(["given", "none", "absent"])
        if choice != "absent":
            config["num_key_value_heads"] = kv if choice == "given" else None
        head_dim_choice = rng.choice(["given", "none", "absent"])
        if head_dim_choice != "absent":
            config["head_dim"] = (
                rng.choice([64, 96, 128, 256]) if head_dim_choice == "given" else None
            )
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        yield config, 2 * config["num_hidden_layers"] * kv_heads * head_dim


def test_counts_keys_and_values(learner):
    """Each token stores a key and a value: the product starts with 2."""
    one = {
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "head_dim": 1,
        "hidden_size": 1,
    }
    check_equal(
        learner.kv_bytes_per_token(one, 1),
        2,
        "kv_bytes_per_token(1 layer, 1 KV head, head_dim 1, 1 byte)",
    )


def test_qwen3_06b_costs_112_kib_per_token(learner):
    """2 (K and V) x 28 layers x 8 KV heads x 128 x 2 bytes: KV heads, not the 16 query
    heads."""
    check_equal(
        learner.kv_bytes_per_token(QWEN3_06B), 114688, "kv_bytes_per_token(Qwen3-0.6B, bf16)"
    )


def test_missing_fields_fall_back_to_one_kv_head_per_query_head(learner):
    """Without num_key_value_heads and head_dim: 32 KV heads of 4096 // 32 = 128 numbers."""
    check_equal(
        learner.kv_bytes_per_token(LLAMA2_7B), 524288, "kv_bytes_per_token(a Llama-2-7B config)"
    )
    with_nones = dict(LLAMA2_7B, num_key_value_heads=None, head_dim=None)
    check_equal(
        learner.kv_bytes_per_token(with_nones), 524288, "kv_bytes_per_token(fields set to None)"
    )


def test_a_64k_context_slot_needs_8_gib_per_gpu(learner):
    """TP2: 2 x 16 full-attention layers x 32 // 2 = 16 KV heads x 128 x 2 bytes = 128 KiB per
    token on each GPU; 65536 tokens make 8 GiB."""
    check_equal(
        learner.kv_bytes_per_token(BIG_HYBRID, 2, tp_size=2) * 65536,
        8 * GiB,
        "bytes of one 64K-token slot per GPU (the hypothetical hybrid, TP2)",
    )


def test_only_full_attention_layers_keep_kv_per_token(learner):
    """With layer_types, only the "full_attention" entries count: linear-attention layers keep
    a fixed-size state, no K/V per token. Without layer_types, every layer counts."""
    check_equal(
        learner.kv_bytes_per_token(BIG_HYBRID, 2),
        2 * 16 * 32 * 128 * 2,
        "kv_bytes_per_token(the hypothetical hybrid: 16 full-attention layers of 64)",
    )
    mixed = dict(QWEN3_06B, num_hidden_layers=5)
    mixed["layer_types"] = ["full_attention", "linear_attention", "linear_attention"] + [
        "full_attention"
    ] * 2
    check_equal(
        learner.kv_bytes_per_token(mixed, 1),
        2 * 3 * 8 * 128,
        f"kv_bytes_per_token(layer_types {mixed['layer_types']}, 1 byte)",
    )
    all_full = dict(QWEN3_06B, layer_types=["full_attention"] * 28)
    check_equal(
        learner.kv_bytes_per_token(all_full),
        114688,
        "kv_bytes_per_token(Qwen3-0.6B with 28 full-attention layer_types)",
    )


def test_kv_heads_are_split_between_gpus(learner):
    """TP2, TP4, TP8: Qwen3-0.6B's 8 KV heads are divided, 4, 2 and 1 per GPU."""
    for tp_size, heads in ((1, 8), (2, 4), (4, 2), (8, 1)):
        check_equal(
            learner.kv_bytes_per_token(QWEN3_06B, 2, tp_size=tp_size),
            2 * 28 * heads * 128 * 2,
            f"kv_bytes_per_token(Qwen3-0.6B, tp_size={tp_size}): {heads} KV heads per GPU",
        )


def test_fewer_kv_heads_than_gpus_are_replicated(learner):
    """More GPUs than KV heads: each GPU keeps a copy of one head, max(1, KV // tp_size), as in
    vLLM's Qwen3Attention: never 0 bytes."""
    for tp_size in (16, 32):
        check_equal(
            learner.kv_bytes_per_token(QWEN3_06B, 2, tp_size=tp_size),
            2 * 28 * 1 * 128 * 2,
            f"kv_bytes_per_token(Qwen3-0.6B, 8 KV heads, tp_size={tp_size}): one head per GPU",
        )
    two_heads = dict(QWEN3_06B, num_key_value_heads=2)
    check_equal(
        learner.max_cached_tokens(two_heads, GiB, 2, tp_size=4),
        GiB // (2 * 28 * 1 * 128 * 2),
        "max_cached_tokens(2 KV heads, 1 GiB per GPU, tp_size=4)",
    )


def test_tp_size_that_does_not_fit_the_kv_heads_raises(learner):
    """tp_size must divide the KV heads or be a multiple of them (8 KV heads on 3 or 12 GPUs
    cannot be split or copied evenly): a ValueError that names tp_size."""
    for tp_size in (3, 12):
        error = check_raises(
            ValueError,
            learner.kv_bytes_per_token,
            QWEN3_06B,
            2,
            tp_size,
            what=f"kv_bytes_per_token(8 KV heads, tp_size={tp_size})",
        )
        check_names(error, "tp_size", f"kv_bytes_per_token(8 KV heads, tp_size={tp_size})")


def test_random_hybrids_per_gpu_follow_the_formula(learner):
    """Any layer_types, KV heads and GPU count that fits them: full-attention layers x
    max(1, KV // tp_size) heads."""
    rng = random.Random(5)
    for case, (config, _) in enumerate(random_configs(seed=6, n=40)):
        kv = config.get("num_key_value_heads") or config["num_attention_heads"]
        tp_size = rng.choice([t for t in (1, 2, 3, 4, 8, 16) if kv % t == 0 or t % kv == 0])
        kinds = [rng.choice(["full_attention", "linear_attention"]) for _ in range(8)]
        config = dict(config, num_hidden_layers=len(kinds), layer_types=kinds)
        head_dim = (
            config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        )
        want = 2 * kinds.count("full_attention") * max(1, kv // tp_size) * head_dim * 2
        check_equal(
            learner.kv_bytes_per_token(config, 2, tp_size=tp_size),
            want,
            f"case {case}: kv_bytes_per_token({config}, 2, tp_size={tp_size})",
        )


def test_random_configs_follow_the_formula(learner):
    """Any mix of layers, query and KV heads, head sizes (given or derived) and bytes per number
    (1, 2, 4)."""
    rng = random.Random(1)
    for case, (config, numbers) in enumerate(random_configs(seed=0)):
        size = rng.choice([1, 2, 4])
        check_equal(
            learner.kv_bytes_per_token(config, size),
            numbers * size,
            f"case {case}: kv_bytes_per_token({config}, bytes_per_element={size})",
        )


def test_max_cached_tokens_rounds_down(learner):
    """Only whole tokens fit: 2**30 // 114688 = 9362 (9362.3 rounded down); one byte short of a
    token is 0."""
    check_equal(
        learner.max_cached_tokens(QWEN3_06B, GiB), 9362, "max_cached_tokens(Qwen3-0.6B, 1 GiB)"
    )
    check_equal(
        learner.max_cached_tokens(QWEN3_06B, 114687),
        0,
        "max_cached_tokens with one byte short of a token",
    )
    check_equal(
        learner.max_cached_tokens(QWEN3_06B, 0), 0, "max_cached_tokens with a budget of 0"
    )


def test_random_budgets_hold_whole_tokens(learner):
    """budget // bytes per token, for any config, budget (up to exabytes) and bytes per number:
    integers, no floats."""
    rng = random.Random(2)
    for case, (config, numbers) in enumerate(random_configs(seed=3, n=40)):
        size = rng.choice([1, 2, 4])
        per_token = numbers * size
        # the third budget: one byte short of a whole number of tokens, beyond what a float
        # holds exactly
        budget = rng.choice(
            [
                rng.randrange(10**6),
                rng.randrange(2**50),
                per_token * rng.randrange(2**50, 2**55) - 1,
            ]
        )
        check_equal(
            learner.max_cached_tokens(config, budget, size),
            budget // per_token,
            f"case {case}: max_cached_tokens({config}, {budget}, bytes_per_element={size})",
        )


def test_a_22_gib_budget_holds_less_than_three_64k_slots(learner):
    """TP2: 22 GiB per GPU / 128 KiB per token = 180224 tokens: 2.75 slots of 65536."""
    check_equal(
        learner.max_cached_tokens(BIG_HYBRID, 22 * GiB, 2, tp_size=2),
        180224,
        "max_cached_tokens(the hypothetical hybrid, 22 GiB per GPU, tp_size=2)",
    )


def test_negative_budget_raises_value_error_naming_it(learner):
    """A budget below zero is a mistake in the caller's arithmetic: say so, with the budget in
    the message."""
    for budget in (-1, -4096):
        error = check_raises(
            ValueError,
            learner.max_cached_tokens,
            QWEN3_06B,
            budget,
            what=f"max_cached_tokens(config, {budget})",
        )
        check_names(error, budget, f"max_cached_tokens(config, {budget})")
