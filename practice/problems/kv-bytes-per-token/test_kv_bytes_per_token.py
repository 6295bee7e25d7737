"""Tests for kv_bytes_per_token and max_cached_tokens, with numbers worked out by hand."""

from grading import check_equal, check_raises

GiB = 2**30
QWEN3_06B = {"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "hidden_size": 1024}
LLAMA2_7B = {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096}  # no GQA, no head_dim
# The 27B-class model of the batching reports, per tensor-parallel rank: 16 full-attention layers,
# 16 KV heads of 128 on each of the two GPUs.
BIG_PER_RANK = {"num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                "hidden_size": 5120}


def test_counts_keys_and_values(learner):
    """Each token stores a key and a value: the product starts with 2."""
    one = {"num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 1,
           "hidden_size": 1}
    check_equal(learner.kv_bytes_per_token(one, 1), 2, "kv_bytes_per_token(1 layer, 1 KV head, head_dim 1, 1 byte)")


def test_qwen3_06b_costs_112_kib_per_token(learner):
    """2 (K and V) x 28 layers x 8 KV heads x 128 x 2 bytes: KV heads, not the 16 query heads."""
    check_equal(learner.kv_bytes_per_token(QWEN3_06B), 114688, "kv_bytes_per_token(Qwen3-0.6B, bf16)")


def test_head_dim_comes_from_the_config_when_given(learner):
    """Qwen3 sets head_dim = 128 although hidden_size // heads is 64 (and 4 bytes per number in fp32)."""
    check_equal(learner.kv_bytes_per_token(QWEN3_06B, 4), 229376, "kv_bytes_per_token(Qwen3-0.6B, fp32)")


def test_missing_fields_fall_back_to_one_kv_head_per_query_head(learner):
    """Without num_key_value_heads and head_dim: 32 KV heads of 4096 // 32 = 128 numbers."""
    check_equal(learner.kv_bytes_per_token(LLAMA2_7B), 524288, "kv_bytes_per_token(a Llama-2-7B config)")
    with_nones = dict(LLAMA2_7B, num_key_value_heads=None, head_dim=None)
    check_equal(learner.kv_bytes_per_token(with_nones), 524288, "kv_bytes_per_token(fields set to None)")


def test_a_64k_context_slot_needs_8_gib_per_rank(learner):
    """16 layers x 2 x 16 KV heads x 128 x 2 bytes = 128 KiB per token; 65536 tokens make 8 GiB."""
    check_equal(learner.kv_bytes_per_token(BIG_PER_RANK) * 65536, 8 * GiB, "bytes of one 64K-token slot per rank")


def test_max_cached_tokens_rounds_down(learner):
    """Only whole tokens fit: 2**30 // 114688 = 9362 (9362.3 rounded down)."""
    check_equal(learner.max_cached_tokens(QWEN3_06B, GiB), 9362, "max_cached_tokens(Qwen3-0.6B, 1 GiB)")
    check_equal(learner.max_cached_tokens(QWEN3_06B, 114687), 0, "max_cached_tokens with one byte short of a token")


def test_a_22_gib_budget_holds_less_than_three_64k_slots(learner):
    """22 GiB / 128 KiB per token = 180224 tokens: 2.75 slots of 65536."""
    check_equal(learner.max_cached_tokens(BIG_PER_RANK, 22 * GiB), 180224, "max_cached_tokens(22 GiB per rank)")


def test_negative_budget_raises_value_error(learner):
    """A budget below zero is a mistake in the caller's arithmetic: say so."""
    check_raises(ValueError, learner.max_cached_tokens, QWEN3_06B, -1, what="max_cached_tokens(config, -1)")
