"""Tests for KVCache and generate: the cache on its own, then inside minillm's Transformer."""

import torch

from grading import check_close, check_equal, check_raises
from minillm.kv_cache import generate_without_cache


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def new_cache(learner, model, max_len, batch_size=1):
    cfg = model.cfg
    return learner.KVCache(cfg.num_hidden_layers, max_len, cfg.num_key_value_heads, cfg.head_dim, batch_size)


def test_update_returns_the_whole_history(learner):
    """update stores the new K/V after the stored ones and returns everything stored, old and new."""
    cache = learner.KVCache(1, 8, 2, 4)
    k1, v1, k2, v2 = rand(1, 3, 2, 4, seed=1), rand(1, 3, 2, 4, seed=2), rand(1, 1, 2, 4, seed=3), rand(1, 1, 2, 4, seed=4)
    cache.update(0, k1, v1)
    cache.advance(3)
    k, v = cache.update(0, k2, v2)
    check_close(k, torch.cat([k1, k2], dim=1), "the keys returned by the second update", atol=0)
    check_close(v, torch.cat([v1, v2], dim=1), "the values returned by the second update", atol=0)


def test_length_counts_tokens_not_layer_calls(learner):
    """update must not change length: every layer calls it. Only advance(n) adds n."""
    cache = learner.KVCache(2, 8, 1, 4)
    for layer in range(2):
        cache.update(layer, rand(1, 3, 1, 4, seed=layer), rand(1, 3, 1, 4, seed=layer + 10))
    check_equal(cache.length, 0, "cache.length after update() on both layers, before advance()")
    cache.advance(3)
    check_equal(cache.length, 3, "cache.length after advance(3)")
    k, _ = cache.update(0, rand(1, 1, 1, 4, seed=5), rand(1, 1, 1, 4, seed=6))
    check_equal(k.shape[1], 4, "the number of keys layer 0 returns after 3 stored + 1 new")


def test_layers_keep_separate_histories(learner):
    """One K buffer and one V buffer per layer: layer 1 never sees layer 0's keys."""
    cache = learner.KVCache(2, 4, 1, 2)
    k0, k1 = torch.ones(1, 2, 1, 2), 2 * torch.ones(1, 2, 1, 2)
    cache.update(0, k0, k0)
    k, v = cache.update(1, k1, k1)
    check_close(k, k1, "layer 1's keys", atol=0)
    check_close(v, k1, "layer 1's values", atol=0)


def test_overflow_raises_value_error_and_keeps_the_cache(learner):
    """Check that length + T <= max_len before writing anything; raise ValueError otherwise."""
    cache = learner.KVCache(1, 4, 1, 2)
    first = rand(1, 3, 1, 2, seed=7)
    cache.update(0, first, first)
    cache.advance(3)
    check_raises(ValueError, cache.update, 0, rand(1, 2, 1, 2), rand(1, 2, 1, 2), what="storing 2 tokens after 3 of 4")
    check_equal(cache.length, 3, "cache.length after the failed update")
    last = rand(1, 1, 1, 2, seed=8)
    k, _ = cache.update(0, last, last)
    check_close(k, torch.cat([first, last], dim=1), "the keys after the failed update and a good one", atol=0)


def test_decode_steps_match_a_full_recompute(tiny_model, learner):
    """Each decode step's logits equal the last row of a forward over the whole sequence."""
    ids = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(9))
    cache = new_cache(learner, tiny_model, 16)
    tiny_model(ids[:, :6], cache)  # prefill
    for t in range(6, 9):
        got = tiny_model(ids[:, t:t + 1], cache)[0, -1]
        check_close(got, tiny_model(ids[:, :t + 1])[0, -1], f"the decode logits at position {t}", atol=1e-4)


def test_batch_of_sequences_is_cached_together(tiny_model, learner):
    """The buffers are [batch_size, max_len, kv_heads, head_dim]: every sequence of the batch has its row."""
    ids = torch.randint(0, 512, (2, 6), generator=torch.Generator().manual_seed(10))
    cache = new_cache(learner, tiny_model, 8, batch_size=2)
    tiny_model(ids[:, :5], cache)
    got = tiny_model(ids[:, 5:], cache)[:, -1]
    check_close(got, tiny_model(ids)[:, -1], "the decode logits of a batch of 2 sequences", atol=1e-4)


def test_generate_matches_generation_without_a_cache(tiny_model, learner):
    """Greedy: the argmax of the last position's logits, fed back in; return only the new tokens."""
    prompt = [3, 141, 59, 26, 5]
    check_equal(learner.generate(tiny_model, prompt, 8), generate_without_cache(tiny_model, prompt, 8),
                "generate(model, prompt, 8)")


class CountingModel:
    """Passes every call to the model and writes down how many tokens each call ran."""

    def __init__(self, model):
        self.model, self.tokens_per_call = model, []

    def __call__(self, input_ids, *args, **kwargs):
        self.tokens_per_call.append(int(input_ids.shape[1]))
        return self.model(input_ids, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_generate_runs_one_prefill_then_one_token_per_step(tiny_model, learner):
    """After the prefill, feed only the newest token: the cache holds all the others."""
    counting = CountingModel(tiny_model)
    learner.generate(counting, [3, 141, 59, 26, 5], 4)
    check_equal(counting.tokens_per_call, [5, 1, 1, 1], "the tokens per model call for a 5-token prompt and 4 new tokens")


def test_generate_stops_after_eos(tiny_model, learner):
    """Stop right after producing eos, and include it in the result."""
    prompt = [3, 141, 59, 26, 5]
    full = generate_without_cache(tiny_model, prompt, 8)
    eos = full[2]
    expected = full[:full.index(eos) + 1]
    check_equal(learner.generate(tiny_model, prompt, 8, eos=eos), expected, f"generate(..., eos={eos})")
