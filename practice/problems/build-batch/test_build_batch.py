"""Tests for build_batch: field by field against minillm.runner.build_batch, then through ModelRunner."""

import random

import torch

from grading import check_close, check_equal, check_raises, fail
from minillm.paged import PagedKVCache
from minillm.runner import ModelRunner, build_batch

TENSORS = ["input_ids", "positions", "slot_mapping", "logits_indices"]
LISTS = ["query_start_loc", "seq_lens", "block_tables"]
STEP2 = [([11], 7, [3, 0], True), ([12], 5, [5, 1], True), (list(range(100, 112)), 10, [2, 7, 4, 6, 8, 9], True)]


def compare(got, items, block_size, what):
    want = build_batch(items, block_size)
    for name in TENSORS + LISTS:
        if not hasattr(got, name):
            fail(f"{what}: the result has no field {name}; return a minillm.runner.BatchInput")
        check_equal(getattr(got, name), getattr(want, name), f"{what}: {name}")


def test_chapter_step_metadata(learner):
    """Decode after 7, decode after 5, and tokens 10..21 of a prompt, in one flat batch."""
    compare(learner.build_batch(STEP2, 4), STEP2, 4, "the chapter's second step")


def test_slot_mapping_goes_through_each_block_table(learner):
    """slot = table[p // block_size] * block_size + p % block_size, per request, with its own positions."""
    got = learner.build_batch([([1, 2, 3], 3, [9, 4], False), ([5], 0, [2], True)], 4)
    check_equal(getattr(got, "slot_mapping", None), [39, 16, 17, 8],
                "slot_mapping for 3 tokens after 3 cached (table [9, 4]) and a 1-token prompt (table [2])")


def test_tensors_are_long_even_when_empty(learner):
    """torch.tensor([]) is float32; index tensors must be torch.long, also when no request samples."""
    got = learner.build_batch([([1, 2], 0, [0], False)], 4)
    for name in TENSORS:
        t = getattr(got, name, None)
        if not isinstance(t, torch.Tensor) or t.dtype != torch.long:
            fail(f"{name} should be a torch.long tensor, got {getattr(t, 'dtype', type(t).__name__)} "
                 f"(the batch has no request that samples, so logits_indices is empty)")
    check_equal(got.logits_indices, [], "logits_indices when no request samples")


def test_random_batches_match_minillm(learner):
    """Any mix of prefills, decodes and chunks, with shuffled block tables."""
    rng = random.Random(0)
    for case in range(100):
        block_size, items = rng.choice([1, 2, 4, 16]), []
        for _ in range(rng.randint(1, 5)):
            cached, new = rng.choice([0, rng.randint(0, 30)]), rng.choice([1, rng.randint(1, 10)])
            table = rng.sample(range(100), -(-(cached + new) // block_size) + rng.randint(0, 1))
            items.append(([rng.randrange(512) for _ in range(new)], cached, table, rng.random() < 0.7))
        compare(learner.build_batch(items, block_size), items, block_size, f"case {case} ({len(items)} requests)")


def test_short_block_table_raises_value_error(learner):
    """Position 8 with block_size 4 needs a third block: refuse the batch, naming the request."""
    check_raises(ValueError, learner.build_batch, [([1], 0, [0], True), ([1, 2], 7, [3, 4], True)], 4,
                 what="build_batch where request 1 writes position 8 with a 2-block table")


def test_request_without_new_tokens_raises_value_error(learner):
    """Every request in a step computes at least one token."""
    check_raises(ValueError, learner.build_batch, [([1], 0, [0], True), ([], 3, [1], True)], 4,
                 what="build_batch with an empty token list")


def test_batch_runs_through_model_runner(tiny_model, learner):
    """Two steps of a mixed batch through minillm's ModelRunner give each request's single-sequence logits."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randint(0, 512, (n,), generator=g).tolist() for n in (7, 5, 22))
    cfg, block_size = tiny_model.cfg, 4
    kv = PagedKVCache(cfg.num_hidden_layers, 16, block_size, cfg.num_key_value_heads, cfg.head_dim)
    runner, tables = ModelRunner(tiny_model, kv), [[3, 0], [5, 1], [2, 7, 4, 6, 8, 9]]
    logits = runner.forward(learner.build_batch([(a, 0, tables[0], True), (b, 0, tables[1], True),
                                                 (c[:10], 0, tables[2], False)], block_size))
    na, nb = logits.argmax(-1).tolist()
    logits = runner.forward(learner.build_batch([([na], 7, tables[0], True), ([nb], 5, tables[1], True),
                                                 (c[10:], 10, tables[2], True)], block_size))
    for row, ids, name in [(0, a + [na], "A decode"), (1, b + [nb], "B decode"), (2, c, "C chunk")]:
        with torch.no_grad():
            want = tiny_model(torch.tensor([ids]))[0, -1]
        check_close(logits[row], want, f"the logits of {name} in the second step", atol=1e-4)
