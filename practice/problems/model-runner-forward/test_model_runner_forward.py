"""Tests for runner_forward: a mixed two-step batch against each request's single-sequence logits."""

import pytest
import torch

from grading import check_close, check_equal, check_shape
from minillm.paged import PagedKVCache
from minillm.runner import ModelRunner, build_batch

BLOCK = 4
TABLES = [[3, 0], [5, 1], [2, 7, 4, 6, 8, 9]]


@pytest.fixture
def prompts():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 512, (n,), generator=g).tolist() for n in (7, 5, 22)]


def new_cache(model):
    cfg = model.cfg
    return PagedKVCache(cfg.num_hidden_layers, 16, BLOCK, cfg.num_key_value_heads, cfg.head_dim)


def alone(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]))[0, -1]


def step1(prompts):
    a, b, c = prompts
    return build_batch([(a, 0, TABLES[0], True), (b, 0, TABLES[1], True), (c[:10], 0, TABLES[2], False)], BLOCK)


def test_prefill_logits_match_single_sequence_reference(tiny_model, learner, prompts):
    """Each prompt's last-token logits equal the model's on that prompt alone."""
    logits = learner.runner_forward(tiny_model, new_cache(tiny_model), step1(prompts))
    check_shape(logits, (2, 512), "the logits of step 1 (two requests sample, one does not)")
    for row, name in [(0, "A"), (1, "B")]:
        check_close(logits[row], alone(tiny_model, prompts[row]), f"the logits of prefill {name}", atol=1e-4)


def test_logits_only_at_logits_indices(tiny_model, learner, prompts):
    """Return [M, vocab] for the M rows of batch.logits_indices, not [N, vocab] for every token."""
    a = prompts[0]
    batch = build_batch([(a, 0, TABLES[0], True)], BLOCK)
    logits = learner.runner_forward(tiny_model, new_cache(tiny_model), batch)
    check_shape(logits, (1, 512), "the logits of a 7-token prefill")


def test_output_layer_runs_only_on_the_sampled_rows(tiny_model, learner, prompts):
    """Select rows with batch.logits_indices before model.norm and model.lm_head: the output layer is the costly one."""
    rows = []
    hook = tiny_model.lm_head.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    try:
        learner.runner_forward(tiny_model, new_cache(tiny_model), step1(prompts))
    finally:
        hook.remove()
    check_equal(rows, [2], "the rows lm_head computed for a step of 22 tokens, 2 of them sampled")


def test_writes_kv_for_every_new_token(tiny_model, learner, prompts):
    """Write K/V for all N new tokens, also those of a chunk that samples nothing: later steps read them."""
    mine, ref = new_cache(tiny_model), new_cache(tiny_model)
    learner.runner_forward(tiny_model, mine, step1(prompts))
    ModelRunner(tiny_model, ref).forward(step1(prompts))
    for layer in range(tiny_model.cfg.num_hidden_layers):
        check_close(mine.k[layer], ref.k[layer], f"the cached keys of layer {layer} after step 1", atol=1e-5)
        check_close(mine.v[layer], ref.v[layer], f"the cached values of layer {layer} after step 1", atol=1e-5)


def test_decode_uses_its_own_position(tiny_model, learner, prompts):
    """RoPE at batch.positions: a decode after 7 tokens is at position 7, though it is flat row 0."""
    a = prompts[0]
    kv = new_cache(tiny_model)
    first = learner.runner_forward(tiny_model, kv, build_batch([(a, 0, TABLES[0], True)], BLOCK))
    token = int(first.argmax(-1)[0])
    logits = learner.runner_forward(tiny_model, kv, build_batch([([token], 7, TABLES[0], True)], BLOCK))
    check_close(logits[0], alone(tiny_model, a + [token]), "the logits of A's decode step", atol=1e-4)


def test_mixed_step_matches_single_sequence_reference(tiny_model, learner, prompts):
    """Decode, decode and a prompt chunk in one forward: each row equals its request run alone."""
    a, b, c = prompts
    kv = new_cache(tiny_model)
    first = learner.runner_forward(tiny_model, kv, step1(prompts))
    na, nb = first.argmax(-1).tolist()
    step2 = build_batch([([na], 7, TABLES[0], True), ([nb], 5, TABLES[1], True), (c[10:], 10, TABLES[2], True)], BLOCK)
    logits = learner.runner_forward(tiny_model, kv, step2)
    check_shape(logits, (3, 512), "the logits of step 2")
    for row, ids, name in [(0, a + [na], "A decode"), (1, b + [nb], "B decode"), (2, c, "C's chunk 10..21")]:
        check_close(logits[row], alone(tiny_model, ids), f"the logits of {name}", atol=1e-4)
