"""mini_llm against transformers' Qwen3ForCausalLM on the same checkpoint files."""

import pytest
import torch

from minillm.checks.reference import hf_generate, hf_logits
from minillm.model import RMSNorm, Transformer, apply_rope, causal_attention, rope_cos_sin

# Each config changes something the others do not: tied vs untied head, 1 / 2 / 4 KV heads (MQA,
# GQA, MHA), head_dim 16 vs 32 (with heads * head_dim != hidden), 1 to 3 layers, two RoPE
# thetas.
PARITY_CONFIGS = {
    "tied-mqa-1layer": dict(
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        hidden_size=32,
        tie_word_embeddings=True,
    ),
    "untied-gqa-2layers": dict(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        hidden_size=48,
        intermediate_size=96,
        tie_word_embeddings=False,
    ),
    "tied-mha-3layers": dict(
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        hidden_size=64,
        intermediate_size=128,
        tie_word_embeddings=True,
    ),
    "untied-8q4kv-theta1e4": dict(
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        hidden_size=64,
        intermediate_size=160,
        tie_word_embeddings=False,
        rope_theta=10_000.0,
    ),
    "tied-4q2kv-eps1e5": dict(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        hidden_size=96,
        intermediate_size=64,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
}


@pytest.mark.parametrize("name", PARITY_CONFIGS)
def test_logits_match_transformers(name, tiny_checkpoint, token_ids):
    path = tiny_checkpoint(seed=11, **PARITY_CONFIGS[name])
    model = Transformer.from_pretrained(path)
    ids = token_ids(48, seed=1)
    ours = model(torch.tensor([ids]))[0]  # [T, V]
    theirs = hf_logits(path, ids)
    err = (ours - theirs).abs().max().item()
    assert err < 1e-4, f"{name}: max |logit difference| {err:.2e} >= 1e-4"
    assert theirs.abs().max() > 1.0  # the comparison is not between two near-zero tensors


@pytest.mark.parametrize("name", PARITY_CONFIGS)
def test_greedy_tokens_match_transformers_generate(name, tiny_checkpoint, token_ids):
    path = tiny_checkpoint(seed=11, **PARITY_CONFIGS[name])
    model = Transformer.from_pretrained(path)
    prompt = token_ids(6, seed=2)
    ids = list(prompt)
    for _ in range(20):  # no KV cache here: chapter 1's model on the whole sequence each step
        ids.append(int(model(torch.tensor([ids]), logits_indices=[-1])[0, -1].argmax()))
    assert ids[len(prompt) :] == hf_generate(path, prompt, 20)


def test_default_model_matches_transformers(model, model_path, tokenizer):
    ids = tokenizer("The capital of France is Paris, and the capital of Italy is").input_ids
    err = (model(torch.tensor([ids]))[0] - hf_logits(model_path, ids)).abs().max().item()
    assert err < 1e-4


def test_batch_rows_are_independent(tiny_model, token_ids):
    model = tiny_model()
    a, b = token_ids(12, seed=3), token_ids(12, seed=4)
    both = model(torch.tensor([a, b]))
    assert (both[0] - model(torch.tensor([a]))[0]).abs().max() < 1e-5
    assert (both[1] - model(torch.tensor([b]))[0]).abs().max() < 1e-5


def test_logits_indices_pick_the_rows_that_get_the_output_layer(tiny_model, token_ids):
    model = tiny_model()
    ids = torch.tensor([token_ids(10)])
    full = model(ids)
    last = model(ids, logits_indices=[-1])
    assert last.shape == (1, 1, model.cfg.vocab_size)
    assert (last[0, 0] - full[0, -1]).abs().max() < 1e-5
    some = model(ids, logits_indices=torch.tensor([2, 7]))
    assert (some[0] - full[0, [2, 7]]).abs().max() < 1e-5


def test_flat_tokens_with_explicit_positions_equal_the_batched_call(tiny_model, token_ids):
    model = tiny_model()
    ids = token_ids(9, seed=5)
    batched = model(torch.tensor([ids]))[0]  # [T, V]
    flat = model(torch.tensor(ids), torch.arange(9))  # [N, V]: one sequence laid flat
    assert flat.shape == batched.shape and (flat - batched).abs().max() < 1e-5


def test_a_backend_needs_explicit_positions(tiny_model):
    from minillm.kv_cache import KVCache

    model = tiny_model()
    with pytest.raises(ValueError, match="pass the new tokens' positions"):
        model(torch.tensor([[1, 2]]), attn=KVCache.for_model(model, max_len=4))
    with pytest.raises(
        ValueError, match=r"positions have shape \(3,\): expected \(1, 2\) or \(2,\)"
    ):
        model(torch.tensor([[1, 2]]), torch.arange(3))


def test_tied_head_shares_the_embedding_tensor(tiny_model):
    model = tiny_model(tie_word_embeddings=True)
    assert model.lm_head.weight.data_ptr() == model.embed_tokens.weight.data_ptr()
    untied = tiny_model(tie_word_embeddings=False)
    assert untied.lm_head.weight.data_ptr() != untied.embed_tokens.weight.data_ptr()


def test_rmsnorm_gives_unit_rms_before_the_weight():
    norm = RMSNorm(8, eps=1e-6)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0)) * 5
    rms = norm(x).pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones(3), atol=1e-4)


def test_rope_scores_depend_only_on_the_distance():
    g = torch.Generator().manual_seed(0)
    q, k = (
        torch.randn(1, 1, 16, generator=g),
        torch.randn(1, 1, 16, generator=g),
    )  # [T=1, heads=1, hd]

    def score(m, n):
        cq, sq = rope_cos_sin(torch.tensor([m]), 16, 10_000.0)
        ck, sk = rope_cos_sin(torch.tensor([n]), 16, 10_000.0)
        return (
            apply_rope(q, cq[:, None], sq[:, None]) * apply_rope(k, ck[:, None], sk[:, None])
        ).sum()

    assert abs(score(7, 3) - score(107, 103)) < 1e-4
    assert abs(score(7, 3) - score(7, 5)) > 1e-3  # a different distance gives a different score


def test_causal_attention_cannot_see_the_future():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, 4, 8, generator=g) for _ in range(3))
    out = causal_attention(q, k, v, scale=8**-0.5)
    k2, v2 = k.clone(), v.clone()
    k2[:, 3:], v2[:, 3:] = 100.0, 100.0  # change only positions 3 and 4
    out2 = causal_attention(q, k2, v2, scale=8**-0.5)
    assert torch.equal(out[:, :3], out2[:, :3])
    assert not torch.allclose(out[:, 3:], out2[:, 3:])


def test_bfloat16_load_matches_transformers_in_bfloat16(tiny_checkpoint, token_ids):
    path = tiny_checkpoint(seed=11, **PARITY_CONFIGS["untied-gqa-2layers"])
    model = Transformer.from_pretrained(path, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    ids = token_ids(24, seed=5)
    ours = model(torch.tensor([ids]))[0].float()
    theirs = hf_logits(path, ids, dtype=torch.bfloat16).float()
    scale = theirs.abs().max().item()
    assert (ours - theirs).abs().max().item() < 0.05 * scale  # bf16 keeps ~3 significant digits
