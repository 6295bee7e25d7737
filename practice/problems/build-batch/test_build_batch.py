"""Tests for build_batch: field by field against minillm.runner.build_batch over random mixes
and block
sizes, errors that name the request, and two steps through minillm's ModelRunner against
single-sequence logits."""

import random

import pytest
import torch
from grading import check_close, check_equal, check_names, check_raises, fail

from minillm.paged import PagedKVCache
from minillm.runner import BatchInput, ModelRunner, build_batch

TENSORS = ["input_ids", "positions", "slot_mapping", "logits_indices"]
FIELDS = TENSORS + ["query_start_loc", "seq_lens", "block_tables", "block_size"]
STEP2 = [
    ([11], 7, [3, 0], True),
    ([12], 5, [5, 1], True),
    (list(range(100, 112)), 10, [2, 7, 4, 6, 8, 9], True),
]


def compare(got, items, block_size, what):
    if not isinstance(got, BatchInput):
        fail(
            f"{what}: build_batch should return a minillm.runner.BatchInput, got "
            f"{type(got).__name__}"
        )
    want = build_batch(items, block_size)
    for name in FIELDS:
        value = getattr(got, name)
        if name in TENSORS and not (
            isinstance(value, torch.Tensor)
            and value.dtype == torch.long
            and value.device.type == "cpu"
        ):
            fail(
                f"{what}: {name} should be a torch.long CPU tensor, got "
                f"{getattr(value, 'dtype', type(value).__name__)}"
            )
        check_equal(value, getattr(want, name), f"{what}: {name}")


def random_items(rng, block_size):
    items = []
    for _ in range(rng.randint(1, 6)):
        cached = rng.choice([0, rng.randint(0, 30), rng.randint(500, 3000)])
        new = rng.choice([1, rng.randint(1, 10)])
        table = rng.sample(range(10_000), -(-(cached + new) // block_size) + rng.randint(0, 2))
        items.append(
            ([rng.randrange(512) for _ in range(new)], cached, table, rng.random() < 0.7)
        )
    return items


def test_chapter_step_metadata(learner):
    """Decode after 7, decode after 5, and tokens 10..21 of a prompt, in one flat batch."""
    compare(learner.build_batch(STEP2, 4), STEP2, 4, "the chapter's second step")


def test_slot_mapping_goes_through_each_block_table(learner):
    """slot = table[p // block_size] * block_size + p % block_size, per request, with its own
    positions."""
    got = learner.build_batch([([1, 2, 3], 3, [9, 4], False), ([5], 0, [2], True)], 4)
    check_equal(
        got.slot_mapping,
        [39, 16, 17, 8],
        "slot_mapping for 3 tokens after 3 cached (table [9, 4]) and a 1-token prompt (table "
        "[2])",
    )
    got = learner.build_batch([([1, 2, 3], 3, [9, 4], False), ([5], 0, [2], True)], 3)
    check_equal(got.slot_mapping, [12, 13, 14, 6], "the same with block_size 3")


def test_tensors_are_long_even_when_empty(learner):
    """torch.tensor([]) is float32; index tensors must be torch.long, also when no request
    samples."""
    items = [([1, 2], 0, [0], False)]
    compare(learner.build_batch(items, 4), items, 4, "a batch where no request samples")


@pytest.mark.parametrize("block_size", [1, 3, 4, 16, 7])
def test_random_batches_match_minillm(learner, block_size):
    """Any mix of prefills, decodes and chunks (contexts into the thousands), shuffled and
    longer block tables."""
    rng = random.Random(block_size)
    for case in range(25):
        items = random_items(rng, block_size)
        compare(
            learner.build_batch(items, block_size),
            items,
            block_size,
            f"case {case} (block_size {block_size}, {len(items)} requests)",
        )


def test_items_may_be_tuples(learner):
    """token_ids and block tables may be tuples; block_tables in the batch are lists."""
    items = [((7, 8), 2, (5,), True), ((9,), 0, (1, 3), False)]
    compare(learner.build_batch(items, 4), items, 4, "items made of tuples")


@pytest.mark.parametrize("where", [0, 1, 2])
def test_short_block_table_raises_value_error_naming_the_request(learner, where):
    """Position 8 with block_size 4 needs a third block: refuse the whole batch, naming the
    request."""
    items = [([1], 0, [0], True), ([1], 3, [2], True), ([4, 5], 6, [3], True)]
    items[where] = (
        [1, 2],
        7,
        [3, 4],
        True,
    )  # writes positions 7 and 8: 2 blocks are not enough
    error = check_raises(
        ValueError,
        learner.build_batch,
        items,
        4,
        what=f"build_batch where request {where} writes position 8 with a 2-block table",
    )
    check_names(
        error, f"request {where}", f"build_batch with request {where}'s table too short"
    )


@pytest.mark.parametrize("where", [0, 2])
def test_request_without_new_tokens_raises_value_error_naming_it(learner, where):
    """Every request in a step computes at least one token."""
    items = [([1], 0, [0], True), ([2, 3], 0, [1], True), ([4], 0, [2], True)]
    items[where] = ([], 3, [5], True)
    error = check_raises(
        ValueError,
        learner.build_batch,
        items,
        4,
        what=f"build_batch where request {where} is empty",
    )
    check_names(error, f"request {where}", f"build_batch with request {where} empty")


def test_batches_run_through_model_runner(tiny_model, learner):
    """Two steps of a mixed batch through minillm's ModelRunner give each request's
    single-sequence logits."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randint(0, 512, (n,), generator=g).tolist() for n in (7, 5, 22))
    block_size = 3
    runner = ModelRunner(tiny_model, PagedKVCache.for_model(tiny_model, 24, block_size))
    tables = [[3, 0, 11], [5, 1], [2, 7, 4, 6, 8, 9, 10, 12]]
    logits = runner.forward(
        learner.build_batch(
            [(a, 0, tables[0], True), (b, 0, tables[1], True), (c[:10], 0, tables[2], False)],
            block_size,
        )
    )
    na, nb = logits.argmax(-1).tolist()
    logits = runner.forward(
        learner.build_batch(
            [
                ([na], 7, tables[0], True),
                ([nb], 5, tables[1], True),
                (c[10:], 10, tables[2], True),
            ],
            block_size,
        )
    )
    for row, ids, name in [
        (0, a + [na], "A's decode"),
        (1, b + [nb], "B's decode"),
        (2, c, "C's chunk"),
    ]:
        want = tiny_model(torch.tensor([ids]))[0, -1]
        check_close(logits[row], want, f"the logits of {name} in the second step", atol=1e-4)
