"""The one seam: ModelRunner.forward is the model's own forward with a paged backend, its
metadata is
checked once on the host before any K/V write, and nothing inside it reads a value back to
the host."""

import dataclasses
import inspect

import pytest
import torch

import minillm.runner
from minillm.model import ModelConfig, Transformer
from minillm.paged import PagedKVCache
from minillm.runner import ModelRunner, build_batch

VOCAB = 512
# A prefill of 7 (blocks 3, 1), a decode at position 5 (blocks 0, 9) and positions 10..21 of a
# longer prompt (blocks 4, 2, 7, 5, 8, 6): every kind of row in one step.
STEP = [
    (list(range(100, 107)), 0, [3, 1], True),
    ([42], 5, [0, 9], True),
    (list(range(200, 212)), 10, [4, 2, 7, 5, 8, 6], True),
]
DECODES = [([42], 5, [0, 9], True), ([7], 12, [3, 1, 4, 2], True)]


@pytest.fixture(scope="module")
def small_model(tiny_checkpoint):
    return Transformer.from_pretrained(tiny_checkpoint(seed=7))


def test_runner_holds_no_layer_math():
    source = inspect.getsource(minillm.runner)
    for layer_code in (
        "q_proj",
        "k_proj",
        "o_proj",
        "q_norm",
        "apply_rope",
        "rope_cos_sin",
        "silu",
        "mlp",
        "lm_head",
        "input_layernorm",
        "F.linear",
    ):
        assert layer_code not in source, (
            f"runner.py computes {layer_code} itself instead of running the model"
        )


def test_runner_forward_is_the_models_forward(small_model):
    """Every layer's attention goes through the backend the runner built, and nothing else."""
    kv = PagedKVCache.for_model(small_model, 10, 4)
    calls = []
    original = minillm.runner.PagedAttention.attend

    def spy(self, layer, q, k, v, scale):
        calls.append((layer, tuple(q.shape)))
        return original(self, layer, q, k, v, scale)

    minillm.runner.PagedAttention.attend = spy
    try:
        ModelRunner(small_model, kv).forward(build_batch(STEP, 4))
    finally:
        minillm.runner.PagedAttention.attend = original
    cfg = small_model.cfg
    assert calls == [
        (i, (20, cfg.num_attention_heads, cfg.hd)) for i in range(cfg.num_hidden_layers)
    ]


@pytest.mark.parametrize("items", [STEP, DECODES], ids=["mixed", "decode-only"])
def test_forward_runs_on_the_meta_device(small_model, items):
    """On `meta`, any .item(), .tolist(), `if tensor` or CPU-created tensor inside the forward
    fails."""
    with torch.device("meta"):
        model = Transformer(small_model.cfg)
    kv = PagedKVCache.for_model(model, 10, 4)
    assert kv.device.type == "meta"
    logits = ModelRunner(model, kv).forward(build_batch(items, 4, vocab_size=VOCAB))
    assert logits.device.type == "meta" and logits.shape == (len(items), VOCAB)


@pytest.mark.parametrize("items", [STEP, DECODES], ids=["mixed", "decode-only"])
def test_forward_never_reads_back_to_the_host(small_model, items):
    """No aten op that copies a device value to the host runs inside ModelRunner.forward."""
    kv = PagedKVCache.for_model(small_model, 10, 4)
    runner = ModelRunner(small_model, kv)
    batch = build_batch(
        items, 4, vocab_size=VOCAB
    )  # building the batch and sampling sit outside
    runner.forward(batch)  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        runner.forward(batch)
    ops = {e.key: e.count for e in prof.key_averages()}
    assert (
        ops.get("aten::index_copy_", 0) == 2 * small_model.cfg.num_hidden_layers
    )  # the profile saw the forward
    syncs = {
        op: ops.get(op, 0)
        for op in (
            "aten::_local_scalar_dense",
            "aten::nonzero",
            "aten::is_nonzero",
            "aten::item",
        )
    }
    assert sum(syncs.values()) == 0, syncs


def test_the_sync_check_can_fail(small_model):
    """The same profile does see a host read when one happens (so a zero above means
    something)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        if (small_model.embed_tokens.weight > 100).any():
            pass
    assert any(
        e.key in ("aten::is_nonzero", "aten::_local_scalar_dense") for e in prof.key_averages()
    )


def _bad(field, value):
    return lambda b: dataclasses.replace(b, **{field: value})


BAD_BATCHES = [  # (what is wrong, how to break the chapter's step, the message)
    (
        "block size differs from the cache's",
        _bad("block_size", 8),
        "built with block_size 8, but the cache's blocks hold 4",
    ),
    (
        "seq_lens shorter than the query",
        _bad("seq_lens", [7, 6, 11]),
        "request 2 has 12 new tokens .* and a context of 11",
    ),
    (
        "query_start_loc does not end at N",
        _bad("query_start_loc", [0, 7, 8, 19]),
        "slot_mapping has 20 entries for the 19 new tokens that query_start_loc describes",
    ),
    (
        "query_start_loc not starting at 0",
        _bad("query_start_loc", [1, 7, 8, 20]),
        "query_start_loc starts at 1",
    ),
    (
        "logits_indices out of range",
        _bad("logits_indices", torch.tensor([6, 7, 20])),
        r"logits_indices\[2\] is 20: expected an int >= 0 and <= 19",
    ),
    (
        "a wrong position",
        lambda b: dataclasses.replace(
            b, positions=b.positions.clone().index_fill_(0, torch.tensor([7]), 4)
        ),
        r"request 1 has positions \[4\], but its 1 new tokens end a context of 6: expected "
        r"5..5",
    ),
    (
        "a slot outside the request's blocks",
        lambda b: dataclasses.replace(
            b, slot_mapping=b.slot_mapping.clone().index_fill_(0, torch.tensor([7]), 2)
        ),
        "request 1's token at position 5 writes slot 2, but its block table puts that "
        "position in slot 37",
    ),
    (
        "two tokens writing one slot",
        lambda b: dataclasses.replace(
            b, slot_mapping=b.slot_mapping.clone().index_fill_(0, torch.tensor([0]), 37)
        ),
        "slot 37 appears twice in the slot mapping",
    ),
    (
        "a block outside the cache",
        _bad("block_tables", [[3, 1], [0, 10], [4, 2, 7, 5, 8, 6]]),
        "request 1's block table holds block 10: expected 0 <= block < 10",
    ),
    (
        "too few blocks for the context",
        _bad("block_tables", [[3, 1], [0, 9], [4, 2, 7, 5, 8]]),
        "request 2's block table has 5 blocks, but 22 tokens need 6",
    ),
    (
        "a token outside the vocabulary",
        lambda b: dataclasses.replace(
            b, input_ids=b.input_ids.clone().index_fill_(0, torch.tensor([3]), VOCAB)
        ),
        "token id 512 is outside the vocabulary",
    ),
    (
        "a float tensor",
        _bad("positions", torch.zeros(20)),
        "batch.positions is a torch.float32 tensor",
    ),
]


@pytest.mark.parametrize("name, breaks, message", BAD_BATCHES, ids=[b[0] for b in BAD_BATCHES])
def test_a_bad_batch_raises_before_any_kv_write(small_model, name, breaks, message):
    kv = PagedKVCache.for_model(small_model, 10, 4)
    runner = ModelRunner(small_model, kv)
    runner.forward(build_batch([([1, 2, 3], 0, [8], True)], 4))  # some K/V already in the cache
    before = [t.clone() for t in kv.k + kv.v]
    with pytest.raises(ValueError, match=message):
        runner.forward(breaks(build_batch(STEP, 4)))
    assert all(torch.equal(a, b) for a, b in zip(before, kv.k + kv.v)), (
        f"{name}: the cache changed"
    )


def test_the_unbroken_step_runs(small_model):
    """The step BAD_BATCHES breaks is itself fine, so each failure above is the one change's."""
    logits = ModelRunner(small_model, PagedKVCache.for_model(small_model, 10, 4)).forward(
        build_batch(STEP, 4)
    )
    assert logits.shape == (3, VOCAB) and torch.isfinite(logits).all()


def test_kv_arithmetic_has_one_home():
    """No module computes a ceil-division of blocks or the KV bytes formula inline."""
    import re
    from pathlib import Path

    root = Path(minillm.runner.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        if path.name != "paged.py":
            assert not re.search(r"-\(-[^)]*//", text), (
                f"{path.name} divides by a block size inline: use num_blocks_for"
            )
        if path.name != "kv_cache.py":
            assert not re.search(r"2 \* [a-z_.]*num_hidden_layers \* ", text), (
                f"{path.name} repeats the KV-bytes formula"
            )


def test_cache_for_model_matches_the_model():
    cfg = ModelConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    model = Transformer(cfg).to(torch.bfloat16)
    kv = PagedKVCache.for_model(model, num_blocks=5, block_size=4)
    assert (kv.num_layers, kv.num_blocks, kv.block_size, kv.num_kv_heads, kv.head_dim) == (
        3,
        5,
        4,
        2,
        8,
    )
    assert kv.k[0].dtype == torch.bfloat16
    assert PagedKVCache.bytes_per_block(model, 4) == 4 * 2 * 3 * 2 * 8 * 2
