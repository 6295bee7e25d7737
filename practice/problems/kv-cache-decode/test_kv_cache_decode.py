"""Tests for KVCache and generate: the cache on its own (any heads, sizes, batches, dtypes), as
the
attention backend of minillm's Transformer, and generate's model calls counted one by one."""

import pytest
import torch
from grading import (
    check_close,
    check_equal,
    check_names,
    check_raises,
    defined_in,
    fail,
    share,
    storage,
)

from minillm.kv_cache import forward_cached, generate_without_cache
from minillm.model import causal_attention


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def new_cache(learner, model, max_len, batch_size=1):
    cfg = model.cfg
    return learner.KVCache(
        cfg.num_hidden_layers, max_len, cfg.num_key_value_heads, cfg.head_dim, batch_size
    )


def test_buffers_are_preallocated_per_layer(learner):
    """k and v hold one [batch_size, max_len, kv_heads, head_dim] buffer per layer, in the dtype
    asked for."""
    cache = learner.KVCache(3, 11, 5, 6, 2, torch.bfloat16)
    check_equal(
        [len(cache.k), len(cache.v), cache.length, cache.max_len],
        [3, 3, 0, 11],
        "[len(k), len(v), length, max_len] of KVCache(3 layers, max_len 11, ...)",
    )
    check_equal(
        [(tuple(t.shape), t.dtype) for t in cache.k + cache.v],
        [((2, 11, 5, 6), torch.bfloat16)] * 6,
        "the shapes and dtypes of the buffers",
    )


def test_update_returns_the_whole_history(learner):
    """update stores the new K/V after the stored ones and returns everything stored, old and
    new."""
    cache = learner.KVCache(1, 8, 2, 4)
    k1, v1, k2, v2 = (
        rand(1, 3, 2, 4, seed=1),
        rand(1, 3, 2, 4, seed=2),
        rand(1, 1, 2, 4, seed=3),
        rand(1, 1, 2, 4, seed=4),
    )
    cache.update(0, k1, v1)
    cache.advance(3)
    k, v = cache.update(0, k2, v2)
    check_close(k, torch.cat([k1, k2], dim=1), "the keys returned by the second update", atol=0)
    check_close(
        v, torch.cat([v1, v2], dim=1), "the values returned by the second update", atol=0
    )


def test_length_counts_tokens_not_layer_calls(learner):
    """update must not change length: every layer calls it. Only advance(n) adds n."""
    cache = learner.KVCache(3, 9, 1, 4)
    for layer in range(3):
        cache.update(layer, rand(1, 3, 1, 4, seed=layer), rand(1, 3, 1, 4, seed=layer + 10))
    check_equal(
        cache.length, 0, "cache.length after update() on all 3 layers, before advance()"
    )
    cache.advance(3)
    check_equal(cache.length, 3, "cache.length after advance(3)")
    k, _ = cache.update(1, rand(1, 2, 1, 4, seed=5), rand(1, 2, 1, 4, seed=6))
    check_equal(k.shape[1], 5, "the number of keys layer 1 returns after 3 stored + 2 new")


def test_layers_keep_separate_histories(learner):
    """One K buffer and one V buffer per layer: layer 1 never sees layer 0's keys."""
    cache = learner.KVCache(2, 4, 1, 2)
    k0, k1 = torch.ones(1, 2, 1, 2), 2 * torch.ones(1, 2, 1, 2)
    cache.update(0, k0, k0)
    k, v = cache.update(1, k1, -k1)
    check_close(k, k1, "layer 1's keys", atol=0)
    check_close(v, -k1, "layer 1's values", atol=0)


def test_history_is_written_into_the_buffers(learner):
    """The stored keys are cache.k[layer][:, :length], in buffers that are never replaced."""
    cache = learner.KVCache(2, 6, 2, 3, 2)
    before = [storage(cache, name, layer) for name in ("k", "v") for layer in range(2)]
    k = rand(2, 4, 2, 3, seed=7)
    for layer in range(2):
        cache.update(layer, k + layer, -k)
    cache.advance(4)
    cache.update(0, k[:, :2], k[:, :2])
    check_close(
        cache.k[1][:, :4], k + 1, "cache.k[1][:, :4] after storing 4 tokens in layer 1", atol=0
    )
    check_equal(
        [storage(cache, name, layer) for name in ("k", "v") for layer in range(2)],
        before,
        "where the buffers live after three updates (allocate them once, in __init__)",
    )


def test_overflow_raises_value_error_and_keeps_the_cache(learner):
    """Check that length + T <= max_len before writing anything; raise ValueError naming max_len
    otherwise."""
    cache = learner.KVCache(1, 5, 1, 2)
    first = rand(1, 3, 1, 2, seed=7)
    cache.update(0, first, first)
    cache.advance(3)
    for method in ("update", "attend"):
        args = (
            (0, rand(1, 3, 1, 2), rand(1, 3, 1, 2))
            if method == "update"
            else (0, rand(1, 3, 1, 2), rand(1, 3, 1, 2), rand(1, 3, 1, 2), 1.0)
        )
        error = check_raises(
            ValueError,
            getattr(cache, method),
            *args,
            what=f"{method} of 3 tokens after 3 of max_len 5",
        )
        check_names(error, 5, f"{method} of 3 tokens after 3 of max_len 5")
    check_equal(cache.length, 3, "cache.length after the refused calls")
    last = rand(1, 2, 1, 2, seed=8)
    k, _ = cache.update(0, last, last)
    check_close(
        k,
        torch.cat([first, last], dim=1),
        "the keys after the refused calls and one that fits",
        atol=0,
    )


ATTEND = [  # batch, heads, kv_heads, head_dim, scale, chunks of new tokens
    (1, 4, 2, 8, 8**-0.5, [5, 1, 1]),
    (3, 6, 2, 4, 0.7, [2, 3, 1]),
    (2, 3, 1, 16, 0.05, [1, 1, 4]),
    (1, 8, 8, 6, 1.5, [7]),
]


@pytest.mark.parametrize("case", range(len(ATTEND)))
def test_attend_sees_the_whole_history(learner, case):
    """attend stores the new K/V, then each new token sees every stored key up to its own
    position (GQA, the given scale)."""
    B, H, KV, hd, scale, chunks = ATTEND[case]
    cache = learner.KVCache(2, sum(chunks) + 2, KV, hd, B)
    keys, values = torch.zeros(B, 0, KV, hd), torch.zeros(B, 0, KV, hd)
    for step, T in enumerate(chunks):
        q, k, v = (
            rand(B, T, H, hd, seed=3 * step),
            rand(B, T, KV, hd, seed=3 * step + 1),
            rand(B, T, KV, hd, seed=3 * step + 2),
        )
        keys, values = torch.cat([keys, k], 1), torch.cat([values, v], 1)
        got = cache.attend(1, q, k, v, scale)
        check_close(
            got,
            causal_attention(q, keys, values, scale),
            f"attend at step {step} ({T} new tokens after {keys.shape[1] - T}, batch {B}, {H} "
            "heads over "
            f"{KV} KV heads, scale {scale:g})",
            atol=1e-5,
        )
        cache.advance(T)


def test_decode_steps_match_a_full_recompute(tiny_model, learner):
    """Prefill then decodes through the model: each step's logits equal a forward over the whole
    sequence."""
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(9))
    cache = new_cache(learner, tiny_model, 16)
    forward_cached(tiny_model, cache, ids[:, :6])
    for t in range(6, 12, 2):  # chunks of 2 new tokens, then their next one would follow
        got = forward_cached(tiny_model, cache, ids[:, t : t + 2])
        check_close(
            got[0],
            tiny_model(ids[:, : t + 2])[0, -1],
            f"the logits at position {t + 1}",
            atol=1e-4,
        )
    check_equal(cache.length, 12, "cache.length after 12 tokens")


def test_batch_of_sequences_is_cached_together(tiny_model, learner):
    """The buffers are [batch_size, max_len, kv_heads, head_dim]: every sequence of the batch
    has its row."""
    ids = torch.randint(0, 512, (3, 7), generator=torch.Generator().manual_seed(10))
    cache = new_cache(learner, tiny_model, 8, batch_size=3)
    forward_cached(tiny_model, cache, ids[:, :5])
    forward_cached(tiny_model, cache, ids[:, 5:6])
    got = forward_cached(tiny_model, cache, ids[:, 6:])
    check_close(
        got, tiny_model(ids)[:, -1], "the decode logits of a batch of 3 sequences", atol=1e-4
    )


class CountingModel:
    """Passes every call to the model and writes down what each call ran: tokens, positions,
    backend."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, input_ids, positions=None, attn=None, logits_indices=None):
        self.calls.append(
            (int(input_ids.shape[-1]), None if positions is None else positions.tolist(), attn)
        )
        return self.model(input_ids, positions, attn, logits_indices)

    def check_token_ids(self, input_ids):
        return self.model.check_token_ids(input_ids)

    def __getattr__(self, name):
        return getattr(self.model, name)


def counted(model):
    return share(CountingModel(model), call=True, methods=["check_token_ids"])


@pytest.mark.parametrize("prompt", [[3, 141, 59, 26, 5], [7], list(range(300, 321))])
def test_generate_matches_generation_without_a_cache(tiny_model, learner, prompt):
    """Greedy: the argmax of the last position's logits, fed back in; return only the new
    tokens."""
    check_equal(
        learner.generate(tiny_model, prompt, 8),
        generate_without_cache(tiny_model, prompt, 8),
        f"generate(model, a {len(prompt)}-token prompt, 8)",
    )


def test_generate_runs_one_prefill_then_one_token_per_step(tiny_model, learner):
    """After the prefill, feed only the newest token, at the next position: the cache holds all
    the others."""
    model = counted(tiny_model)
    learner.generate(model, [3, 141, 59, 26, 5, 97], 5)
    check_equal(
        [(n, p) for n, p, _ in model.calls],
        [(6, [0, 1, 2, 3, 4, 5]), (1, [6]), (1, [7]), (1, [8]), (1, [9])],
        "(tokens, positions) of each model call for a 6-token prompt and 5 new tokens",
    )


def test_generate_uses_one_of_your_caches(tiny_model, learner):
    """Every model call of one generate gets the same backend: a KVCache of your file (not
    minillm's)."""
    model = counted(tiny_model)
    learner.generate(model, [11, 12, 13], 3)
    backends = [attn for _, _, attn in model.calls]
    if any(a is None for a in backends) or any(a is not backends[0] for a in backends):
        fail(
            f"the model calls of generate got the backends {backends}: expected one and the "
            "same cache in every call"
        )
    check_equal(
        defined_in(backends[0]),
        defined_in(learner.KVCache),
        "the class of the cache generate passes the model",
    )


def test_generate_stops_after_eos(tiny_model, learner):
    """Stop right after producing eos, include it, and call the model no more."""
    prompt = [3, 141, 59, 26, 5]
    full = generate_without_cache(tiny_model, prompt, 8)
    eos = full[2]
    expected = full[: full.index(eos) + 1]
    model = counted(tiny_model)
    check_equal(
        learner.generate(model, prompt, 8, eos=eos), expected, f"generate(..., eos={eos})"
    )
    check_equal(len(model.calls), len(expected), f"the model calls of generate(..., eos={eos})")


def test_generate_stops_when_the_prefill_picks_eos(tiny_model, learner):
    """The prefill's token can be eos too: return it alone, after the one prefill call."""
    prompt = [3, 141, 59, 26, 5]
    eos = generate_without_cache(tiny_model, prompt, 1)[0]
    model = counted(tiny_model)
    check_equal(
        learner.generate(model, prompt, 8, eos=eos), [eos], f"generate(..., 8, eos={eos})"
    )
    check_equal(len(model.calls), 1, f"the model calls of generate(..., 8, eos={eos})")


def test_one_new_token_is_the_prefill_alone(tiny_model, learner):
    """max_new_tokens=1: the prefill's logits give the token; no decode step runs."""
    model = counted(tiny_model)
    check_equal(
        learner.generate(model, [1, 2, 3], 1),
        generate_without_cache(tiny_model, [1, 2, 3], 1),
        "generate(model, [1, 2, 3], 1)",
    )
    check_equal(len(model.calls), 1, "the model calls of generate(model, [1, 2, 3], 1)")
