"""The contiguous KV cache: decoding with it must give exactly what recomputing everything
gives."""

import pytest
import torch

from minillm.kv_cache import (
    KVCache,
    forward_cached,
    generate,
    generate_without_cache,
    kv_bytes_per_token,
)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        dict(num_key_value_heads=1, num_hidden_layers=3),
        dict(tie_word_embeddings=False, num_key_value_heads=4),
    ],
)
def test_decode_step_logits_equal_a_full_recompute(tiny_model, token_ids, overrides):
    model = tiny_model(**overrides)
    prompt = token_ids(7, seed=1)
    new, step_logits = generate(model, prompt, 16, return_logits=True)  # [16, V]
    full = model(torch.tensor([prompt + new]))[0]  # [T, V]: position t predicts token t + 1
    recomputed = full[len(prompt) - 1 : len(prompt) - 1 + len(new)]
    for step in range(len(new)):
        err = (step_logits[step] - recomputed[step]).abs().max().item()
        assert err < 1e-4, f"decode step {step}: max |logit difference| {err:.2e}"


def test_generate_equals_generate_without_cache(tiny_model, token_ids):
    model = tiny_model(seed=3)
    for seed in range(3):
        prompt = token_ids(5 + seed, seed=seed)
        assert generate(model, prompt, 12) == generate_without_cache(model, prompt, 12)


def test_default_model_generate_equals_generate_without_cache(model, tokenizer):
    prompt = tokenizer("Once upon a time").input_ids
    assert generate(model, prompt, 8) == generate_without_cache(model, prompt, 8)


def test_decode_sees_whole_history(tiny_model, token_ids):
    model = tiny_model()
    prompt = token_ids(6, seed=2)
    cache = KVCache.for_model(model, max_len=8)
    forward_cached(model, cache, torch.tensor([prompt]), last_only=False)
    with_history = forward_cached(model, cache, torch.tensor([[5]]), last_only=False)[0, -1]
    alone = model(torch.tensor([[5]]))[0, -1]  # the same token with no history at position 0
    assert cache.length == 7
    assert (with_history - model(torch.tensor([prompt + [5]]))[0, -1]).abs().max() < 1e-4
    assert (with_history - alone).abs().max() > 1e-2


def test_chunked_prefill_equals_one_prefill(tiny_model, token_ids):
    model = tiny_model()
    ids = token_ids(12, seed=4)
    cache = KVCache.for_model(model, max_len=12)
    first = forward_cached(model, cache, torch.tensor([ids[:5]]), last_only=False)
    second = forward_cached(
        model, cache, torch.tensor([ids[5:]]), last_only=False
    )  # 7 tokens that attend to the 5 cached ones
    full = model(torch.tensor([ids]))
    assert (torch.cat([first, second], dim=1) - full).abs().max() < 1e-4


def test_cache_holds_what_the_model_wrote_and_zeros_after(tiny_model, token_ids):
    model = tiny_model()
    cache = KVCache.for_model(model, max_len=10)
    forward_cached(model, cache, torch.tensor([token_ids(4)]), last_only=False)
    for layer in range(model.cfg.num_hidden_layers):
        assert cache.k[layer][:, :4].abs().sum() > 0 and cache.v[layer][:, :4].abs().sum() > 0
        assert cache.k[layer][:, 4:].abs().sum() == 0 and cache.v[layer][:, 4:].abs().sum() == 0


def test_batched_cache_decodes_each_row_independently(tiny_model, token_ids):
    model = tiny_model()
    a, b = token_ids(5, seed=5), token_ids(5, seed=6)
    cache = KVCache.for_model(model, max_len=6, batch_size=2)
    forward_cached(model, cache, torch.tensor([a, b]), last_only=False)
    step = forward_cached(model, cache, torch.tensor([[7], [9]]), last_only=False)[
        :, -1
    ]  # [2, V]
    assert (step[0] - model(torch.tensor([a + [7]]))[0, -1]).abs().max() < 1e-4
    assert (step[1] - model(torch.tensor([b + [9]]))[0, -1]).abs().max() < 1e-4


def test_cache_overflow_names_the_position_and_leaves_the_cache_unchanged(
    tiny_model, token_ids
):
    model = tiny_model()
    cache = KVCache.for_model(model, max_len=6)
    forward_cached(model, cache, torch.tensor([token_ids(5)]), last_only=False)
    before = [k.clone() for k in cache.k]
    with pytest.raises(ValueError, match=r"holds 6 tokens; position 7 does not fit"):
        forward_cached(model, cache, torch.tensor([[1, 2, 3]]), last_only=False)
    assert cache.length == 5
    assert all(torch.equal(k, b) for k, b in zip(cache.k, before))


def test_out_of_vocab_token_leaves_the_cache_unchanged(tiny_model, token_ids):
    model = tiny_model()
    cache = KVCache.for_model(model, max_len=8)
    forward_cached(model, cache, torch.tensor([token_ids(3)]), last_only=False)
    with pytest.raises(ValueError, match="token id 512 is outside the vocabulary"):
        forward_cached(model, cache, torch.tensor([[512]]), last_only=False)
    assert cache.length == 3


def test_cache_rejects_a_batch_of_the_wrong_size(tiny_model, token_ids):
    model = tiny_model()
    cache = KVCache.for_model(model, max_len=8, batch_size=1)
    with pytest.raises(
        ValueError, match="batch of 2 sequences was given to a cache built for 1"
    ):
        forward_cached(
            model, cache, torch.tensor([token_ids(3), token_ids(3, seed=1)]), last_only=False
        )
    assert cache.length == 0


def test_generate_stops_after_eos(tiny_model, token_ids):
    model = tiny_model()
    prompt = token_ids(5)
    free = generate(model, prompt, 10)
    eos = free[3]
    stopped = generate(model, prompt, 10, eos=eos)
    assert stopped == free[: free.index(eos) + 1]
    assert generate_without_cache(model, prompt, 10, eos=eos) == stopped


@pytest.mark.parametrize("fn", [generate, generate_without_cache])
def test_generate_rejects_empty_prompt_and_zero_tokens(tiny_model, fn):
    model = tiny_model()
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        fn(model, [], 3)
    with pytest.raises(ValueError, match="max_new_tokens is 0"):
        fn(model, [1, 2], 0)


def test_kv_bytes_per_token_for_real_models():
    assert kv_bytes_per_token(28, 8, 128, 2) == 114_688  # Qwen3-0.6B in bf16: 112 KiB per token
    per_layer_per_slot = (
        kv_bytes_per_token(1, 16, 128, 2) * 65_536
    )  # the seeds' 27B, TP2, 64K example
    assert per_layer_per_slot == 512 * 2**20


def test_cache_bytes_per_token_matches_the_formula(tiny_model):
    model = tiny_model()
    cache = KVCache.for_model(model, max_len=4)
    cfg = model.cfg
    assert cache.bytes_per_token() == kv_bytes_per_token(
        cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hd, 4
    )
    assert cache.bytes_per_token() * 4 == sum(
        k.numel() * 4 + v.numel() * 4 for k, v in zip(cache.k, cache.v)
    )
