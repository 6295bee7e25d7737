"""runner.py: the flat batch layout, its errors, and one mixed forward equal to single-sequence
runs."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.model import Transformer
from minillm.paged import PagedKVCache
from minillm.runner import ModelRunner, build_batch

VOCAB = 512
TOL = 1e-4  # fp32


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint(seed=7)  # vocab 512, hidden 32, 2 layers, no tokenizer


@pytest.fixture(scope="module")
def small_model(ckpt):
    return Transformer.from_pretrained(ckpt)


def new_cache(model, num_blocks, block_size, dtype=torch.float32, device="cpu"):
    cfg = model.cfg
    return PagedKVCache(
        cfg.num_hidden_layers,
        num_blocks,
        block_size,
        cfg.num_key_value_heads,
        cfg.hd,
        dtype,
        device,
    )


# --- the layout
#   -------------------------------------------------------------------------------------------


def test_chapter_example_layout():
    # A: full prefill of 7; B: decode at position 5; C: positions 10..21 of a longer prompt.
    a, c = list(range(100, 107)), list(range(200, 212))
    batch = build_batch(
        [(a, 0, [3, 1], True), ([42], 5, [0, 9], True), (c, 10, [4, 2, 7, 5, 8, 6], True)], 4
    )
    assert batch.input_ids.tolist() == a + [42] + c
    assert batch.positions.tolist() == list(range(7)) + [5] + list(range(10, 22))
    assert batch.query_start_loc == [0, 7, 8, 20]
    assert batch.seq_lens == [7, 6, 22]
    assert batch.logits_indices.tolist() == [6, 7, 19]
    # position 5 of B lives in its block 1 (id 9), offset 1; position 10 of C in its block 2 (id
    # 7), offset 2
    assert batch.slot_mapping[7].item() == 9 * 4 + 1
    assert batch.slot_mapping[8].item() == 7 * 4 + 2
    assert (batch.num_tokens, batch.num_reqs) == (20, 3)


def test_source_exercise_layout():
    batch = build_batch(
        [
            ([5], 30, [0, 1], True),
            (list(range(6)), 0, [2], True),
            ([7, 8, 9, 10], 16, [3, 4], False),
        ],
        block_size=16,
    )
    assert batch.query_start_loc == [0, 1, 7, 11]
    assert batch.seq_lens == [31, 6, 20]
    assert batch.positions.tolist() == [30, 0, 1, 2, 3, 4, 5, 16, 17, 18, 19]
    assert batch.logits_indices.tolist() == [0, 6]


@st.composite
def flat_batches(draw):
    block_size = draw(st.integers(1, 8))
    items = []
    for _ in range(draw(st.integers(1, 8))):
        n, k = draw(st.integers(1, 10)), draw(st.integers(0, 20))
        blocks = draw(
            st.lists(
                st.integers(0, 200),
                min_size=-(-(k + n) // block_size),
                max_size=-(-(k + n) // block_size) + 2,
                unique=True,
            )
        )
        items.append(
            (
                draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n)),
                k,
                blocks,
                draw(st.booleans()),
            )
        )
    return block_size, items


@settings(max_examples=100, deadline=None)
@given(flat_batches())
def test_metadata_describes_every_token(case):
    block_size, items = case
    batch = build_batch(items, block_size, vocab_size=VOCAB)
    qsl = batch.query_start_loc
    assert (
        qsl[0] == 0
        and qsl[-1]
        == batch.input_ids.numel()
        == batch.positions.numel()
        == batch.slot_mapping.numel()
    )
    for i, (ids, k, table, _) in enumerate(items):
        assert batch.input_ids[qsl[i] : qsl[i + 1]].tolist() == ids
        assert batch.positions[qsl[i] : qsl[i + 1]].tolist() == list(range(k, k + len(ids)))
        assert batch.seq_lens[i] == k + len(ids)
        for p, slot in zip(
            range(k, k + len(ids)), batch.slot_mapping[qsl[i] : qsl[i + 1]].tolist()
        ):
            assert divmod(slot, block_size) == (table[p // block_size], p % block_size)


@settings(max_examples=100, deadline=None)
@given(flat_batches())
def test_logits_indices_select_exactly_the_requests_that_asked(case):
    block_size, items = case
    batch = build_batch(items, block_size)
    asked = [i for i, item in enumerate(items) if item[3]]
    assert batch.logits_indices.tolist() == [batch.query_start_loc[i + 1] - 1 for i in asked]


# --- bad input
#   --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "items, block_size, message",
    [
        ([], 4, "no items"),
        ([([], 0, [0], True)], 4, "request 0 has an empty token list"),
        ([([1], 0, [0], True), ([2], -1, [1], True)], 4, "request 1 has num_computed=-1"),
        (
            [([1, 2, 3, 4, 5], 0, [0], True)],
            4,
            "position 4 needs block 1, but the block table has 1 blocks",
        ),
        ([([1], 8, [0, 1], True)], 4, "position 8 needs block 2"),
        ([([1, 600], 0, [0], True)], 4, "token id 600 outside the vocabulary"),
        ([([1, -3], 0, [0], True)], 4, "token id -3 outside the vocabulary"),
        ([([1.5], 0, [0], True)], 4, "token 1.5"),
        ([([1], 0, [-2], True)], 4, "block id -2"),
        ([([1], 0, [0], True)], 0, "block_size is 0"),
        ([([1], 0, [0])], 4, "expected (token_ids, num_computed, block_table, need_logits)"),
    ],
)
def test_bad_input_raises_a_named_error(items, block_size, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_batch(items, block_size, vocab_size=VOCAB)


@settings(max_examples=100, deadline=None)
@given(flat_batches(), st.data())
def test_one_bad_request_is_named_in_the_error(case, data):
    block_size, items = case
    r = data.draw(st.integers(0, len(items) - 1))
    ids, k, table, need = items[r]
    fault = data.draw(st.sampled_from(["empty", "negative", "short", "vocab"]))
    bad, message = {
        "empty": (([], k, table, need), "empty token list"),
        "negative": ((ids, -1 - k, table, need), f"num_computed={-1 - k}"),
        "short": (
            (ids, k, table[: (k + len(ids) - 1) // block_size], need),
            f"position {k + len(ids) - 1} needs block",
        ),
        "vocab": (
            (ids[:-1] + [VOCAB], k, table, need),
            f"token id {VOCAB} outside the vocabulary",
        ),
    }[fault]
    with pytest.raises(ValueError, match=f"request {r}\\b.*{message}"):
        build_batch(items[:r] + [bad] + items[r + 1 :], block_size, vocab_size=VOCAB)


def test_bad_batch_leaves_the_cache_unchanged(small_model):
    kv = new_cache(small_model, 4, 4)
    runner = ModelRunner(small_model, kv)
    runner.forward(build_batch([([1, 2, 3], 0, [2], True)], 4))
    before = [t.clone() for t in kv.k + kv.v]
    for items in (
        [([1, 2], 0, [9], True)],  # block 9 is outside the 4-block cache
        [([4, 700], 0, [1], True)],
    ):  # token 700 is outside the vocabulary (not checked by build_batch)
        with pytest.raises(ValueError, match="block 9|token id 700"):
            runner.forward(build_batch(items, 4))
    assert all(torch.equal(a, b) for a, b in zip(before, kv.k + kv.v))


def test_batch_tensors_must_be_host_metadata(small_model):
    runner = ModelRunner(small_model, new_cache(small_model, 2, 4))
    batch = build_batch([([1], 0, [0], True)], 4)
    batch.positions = batch.positions.to(
        "meta"
    )  # reading a device tensor back would stall the step
    with pytest.raises(
        ValueError, match="batch.positions is on meta: BatchInput holds host metadata"
    ):
        runner.forward(batch)


def test_cache_must_match_the_model(small_model):
    with pytest.raises(ValueError, match="cache holds torch.bfloat16"):
        ModelRunner(small_model, new_cache(small_model, 2, 4, dtype=torch.bfloat16))
    cfg = small_model.cfg
    with pytest.raises(ValueError, match="model needs"):
        ModelRunner(
            small_model,
            PagedKVCache(cfg.num_hidden_layers + 1, 2, 4, cfg.num_key_value_heads, cfg.hd),
        )


def test_runner_reads_the_models_own_weights(ckpt):
    model = Transformer.from_pretrained(ckpt)
    batch = build_batch([([1, 2, 3], 0, [0], True)], 4)
    before = ModelRunner(model, new_cache(model, 1, 4)).forward(batch)
    runner = ModelRunner(model, new_cache(model, 1, 4))
    with torch.no_grad():
        model.norm.weight.mul_(
            2.0
        )  # changed after the runner was built: a copy would not see it
    after = runner.forward(batch)
    assert (after - before).abs().max().item() > 1.0


# --- one mixed forward equals single sequences
#   ---------------------------------------------------------------


@st.composite
def two_step_workloads(draw):
    """1-8 requests over two steps; step 2 mixes full prefills, chunked prefills and decodes.

    Each request is (tokens, k, need1, need2): step 1 computes tokens[:k] (if k > 0), step 2 the
    rest. Full prefill: k = 0. Decode: one token after k. Chunked prefill: several tokens after
    k > 0.
    """
    block_size = draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    requests = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["prefill", "chunked", "decode"]))
        k = 0 if kind == "prefill" else draw(st.integers(1, 20))
        n = 1 if kind == "decode" else draw(st.integers(1 if kind == "prefill" else 2, 20))
        tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=k + n, max_size=k + n))
        requests.append((tokens, k, draw(st.booleans()), draw(st.booleans())))
    order = draw(
        st.permutations(range(len(requests)))
    )  # step 2 lists the requests in another order
    return block_size, requests, order, draw(st.integers(0, 2**16))


def run_two_steps(model, block_size, requests, order, seed):
    """Run the workload; return [(request, step, logits row)] for every row the runner
    returned."""
    need = [-(-len(tokens) // block_size) for tokens, *_ in requests]
    ids = list(range(sum(need) + 3))
    random.Random(seed).shuffle(ids)  # block tables are scattered, not contiguous
    tables, start = [], 0
    for n in need:
        tables.append(ids[start : start + n])
        start += n
    w = model.embed_tokens.weight
    runner = ModelRunner(model, new_cache(model, len(ids), block_size, w.dtype, w.device))
    rows = []
    step1 = [r for r, (_, k, _, _) in enumerate(requests) if k > 0]
    if step1:
        batch = build_batch(
            [(requests[r][0][: requests[r][1]], 0, tables[r], requests[r][2]) for r in step1],
            block_size,
            vocab_size=VOCAB,
        )
        logits = runner.forward(batch)
        asked = [r for r in step1 if requests[r][2]]
        assert logits.shape[0] == len(asked)
        rows += [(r, 1, row) for r, row in zip(asked, logits)]
    batch = build_batch(
        [
            (requests[r][0][requests[r][1] :], requests[r][1], tables[r], requests[r][3])
            for r in order
        ],
        block_size,
        vocab_size=VOCAB,
    )
    logits = runner.forward(batch)
    asked = [r for r in order if requests[r][3]]
    assert logits.shape[0] == len(asked)
    rows += [(r, 2, row) for r, row in zip(asked, logits)]
    return rows


def worst_error(rows, requests, reference):
    """Max abs difference between each returned row and the reference logits of the same
    prefix."""
    worst = 0.0
    for r, step, row in rows:
        tokens, k = requests[r][0], requests[r][1]
        end = (
            k if step == 1 else len(tokens)
        )  # the row is the logits after the request's last new token
        worst = max(worst, (row.float().cpu() - reference(tokens)[end - 1]).abs().max().item())
    return worst


@settings(max_examples=30, deadline=None)
@given(two_step_workloads())
def test_mixed_batch_equals_single_sequences(small_model, workload):
    block_size, requests, order, seed = workload
    rows = run_two_steps(small_model, block_size, requests, order, seed)
    assert worst_error(rows, requests, lambda ids: small_model(torch.tensor([ids]))[0]) < TOL


@settings(max_examples=6, deadline=None)
@given(two_step_workloads())
def test_mixed_batch_equals_transformers(small_model, ckpt, workload):
    from minillm.checks.reference import hf_logits

    block_size, requests, order, seed = workload
    rows = run_two_steps(small_model, block_size, requests, order, seed)
    assert worst_error(rows, requests, lambda ids: hf_logits(ckpt, ids)) < TOL


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mixed_batch_on_cuda_equals_cpu_reference(small_model, ckpt):
    gpu_model = Transformer.from_pretrained(ckpt, device="cuda")
    requests = [
        (list(range(1, 30)), 0, True, True),
        (list(range(40, 60)), 19, True, True),
        (list(range(100, 140)), 12, False, True),
    ]
    rows = run_two_steps(gpu_model, 4, requests, [2, 0, 1], seed=3)
    assert worst_error(rows, requests, lambda ids: small_model(torch.tensor([ids]))[0]) < TOL


# --- chapter 5's mask figure
#   ------------------------------------------------------------------------------


def test_read_mask_is_block_diagonal_and_end_aligned():
    from minillm.notebook.mask_figure import _read_mask

    # the chapter's example: a prefill of 7, a decode after 5, 12 new tokens after 10 cached
    batch = build_batch(
        [
            (list(range(7)), 0, [5, 2], True),
            ([9], 5, [7, 0], True),
            (list(range(12)), 10, [4, 11, 1, 8, 3, 6], True),
        ],
        4,
    )
    mask = _read_mask(batch)  # [20, 7 + 6 + 22]
    assert mask.shape == (20, 35)
    key_start = [0, 7, 13]
    for i, p in enumerate(batch.positions.tolist()):
        r = next(r for r in range(3) if batch.query_start_loc[r + 1] > i)
        row = mask[i]
        # only request r's keys, and exactly its positions 0..p
        assert (row > 0).nonzero().flatten().tolist() == list(
            range(key_start[r], key_start[r] + p + 1)
        )
        assert set(row[row > 0].tolist()) == {r + 1}
    assert int((mask > 0).sum()) == 232


# --- chapter 5's timers
#   ------------------------------------------------------------------------------


def test_fastest_interleaved_calls_each_fn_once_per_round_in_turn():
    from minillm.notebook.padding_timing import fastest_interleaved

    calls = []
    best = fastest_interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3
    )
    assert calls == ["a", "b"] * 3  # interleaved, not a's rounds then b's
    assert set(best) == {"a", "b"} and all(0 <= t < float("inf") for t in best.values())


def test_padded_vs_packed_times_every_part_of_both_layouts(small_model):
    from minillm.notebook.padding_timing import padded_vs_packed, padding_table

    times = padded_vs_packed(small_model, [9, 3, 1])
    parts = ("forward", "attention", "rest", "host")
    assert set(times) == {f"{p} {layout}" for p in parts for layout in ("padded", "packed")} | {
        "store packed"
    }  # only the packed run stores K/V
    assert all(0 < t < float("inf") for t in times.values())
    table = padding_table(times, small_model.cfg.num_hidden_layers)
    lines = table.splitlines()
    assert len(lines) == 8 and "the parts" in lines[-2] and "estimated" in lines[-1]
