"""Chapter 11: the Triton kernels equal the torch reference (in Triton's interpreter on a CPU).

Without triton installed these tests skip (saying so); `make test` installs it (the `kernels`
extra), so in CI they run. Without CUDA, minillm.kernels runs the kernels in the interpreter
(TRITON_INTERPRET=1).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.kernels import interpreting, load_triton, triton_available
from minillm.model import Transformer
from minillm.paged import PagedKVCache, paged_attention, paged_decode_attention
from minillm.runner import ModelRunner, build_batch

ROOT = Path(__file__).resolve().parents[1]
needs_triton = pytest.mark.skipif(
    not triton_available(), reason="triton is not installed: pip install -e '.[kernels]'"
)
TOL = 1e-5  # fp32 kernel vs reference
VOCAB = 512
if triton_available():
    # decides, before any kernel is defined, whether they are compiled or interpreted
    load_triton()
# Interpreted kernels take CPU tensors, compiled ones CUDA tensors: the same tests check either.
DEVICE = "cpu" if not torch.cuda.is_available() or interpreting() else "cuda"


def random_case(seed: int):
    """A seeded mixed batch: block size 1-32, GQA group 1-8, head_dim 16-128, contexts up to
    ~300 tokens,
    each request a full prefill, a chunk after cached tokens, or a decode; blocks scattered
    over the pool."""
    rng = random.Random(seed)
    # the shape parameters cycle with the seed, so that 12 seeds cover every value of each
    block_size = [1, 2, 3, 5, 8, 16, 32][seed % 7]
    kv_heads, group = rng.choice([1, 2]), [1, 2, 3, 4, 8][seed % 5]
    head_dim = [16, 32, 48, 64, 80, 128][seed % 6]
    seq_lens, new = [], []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["prefill", "chunk", "decode"])
        seq_len = rng.randint(1, 300 if kind == "decode" else 120)
        seq_lens.append(seq_len)
        new.append(
            seq_len if kind == "prefill" else 1 if kind == "decode" else rng.randint(1, seq_len)
        )
    need = [-(-s // block_size) for s in seq_lens]
    pool = list(range(sum(need) + 2))
    rng.shuffle(pool)
    tables = [pool[sum(need[:i]) : sum(need[: i + 1])] for i in range(len(need))]
    g = torch.Generator().manual_seed(seed)
    kv = PagedKVCache(1, len(pool), block_size, kv_heads, head_dim, device=DEVICE)
    kv.k[0].copy_(torch.randn(kv.k[0].shape, generator=g))
    kv.v[0].copy_(torch.randn(kv.v[0].shape, generator=g))
    qsl = [0]
    for n in new:
        qsl.append(qsl[-1] + n)
    q = torch.randn(qsl[-1], kv_heads * group, head_dim, generator=g).to(DEVICE)
    return q, kv, tables, seq_lens, qsl, head_dim**-0.5


@needs_triton
@pytest.mark.parametrize("seed", range(12))
def test_kernel_equals_paged_attention_on_random_mixed_batches(seed):
    from minillm.kernels.backend import triton_attention

    q, kv, tables, seq_lens, qsl, scale = random_case(seed)
    want = paged_attention(q, kv, 0, tables, seq_lens, qsl, scale)
    got = triton_attention(q, kv, 0, tables, seq_lens, qsl, scale)
    err = (got - want).abs().max().item()
    print(
        f"seed {seed}: block {kv.block_size}, {q.shape[1]}/{kv.num_kv_heads} heads, hd "
        f"{kv.head_dim}, "
        f"contexts {seq_lens}, new {[b - a for a, b in zip(qsl, qsl[1:])]}: max err {err:.1e}"
    )
    assert err < TOL


@needs_triton
def test_kernel_equals_padded_decode_attention():
    from minillm.kernels.backend import triton_attention

    q, kv, tables, seq_lens, _, scale = random_case(3)
    B = len(seq_lens)
    q = torch.randn(B, q.shape[1], kv.head_dim, generator=torch.Generator().manual_seed(1)).to(
        DEVICE
    )  # one each
    want = paged_decode_attention(q, kv, 0, tables, seq_lens, scale)
    assert (
        triton_attention(q, kv, 0, tables, seq_lens, list(range(B + 1)), scale) - want
    ).abs().max() < TOL


@needs_triton
@pytest.mark.parametrize("seed", range(6))
def test_flash_decoding_equals_padded_decode_attention_for_any_segment(seed):
    from minillm.kernels.split_decode import split_decode_attention

    q, kv, tables, seq_lens, _, scale = random_case(seed)
    B = len(seq_lens)
    q = torch.randn(
        B, q.shape[1], kv.head_dim, generator=torch.Generator().manual_seed(seed)
    ).to(DEVICE)
    want = paged_decode_attention(q, kv, 0, tables, seq_lens, scale)
    from minillm.paged import PagedAttention

    attn = PagedAttention(kv, tables, seq_lens, list(range(B + 1)))
    lens = torch.tensor(seq_lens, device=DEVICE)
    for segment in (32, 64, 256):  # 1 to 10 segments per context
        got = split_decode_attention(
            q, kv.k[0], kv.v[0], attn.block_tables, lens, max(seq_lens), scale, segment
        )
        assert (got - want).abs().max().item() < TOL, (segment, seq_lens)


@needs_triton
def test_the_merge_takes_more_segments_than_its_tile_in_chunks():
    from minillm.kernels.split_decode import MERGE_CHUNK, split_decode_attention
    from minillm.paged import PagedAttention

    # 1,300 keys in segments of 32: 41 segments, 3 chunks of 16 (the last partial); 500: 16
    # segments, exactly one chunk; 20: one segment, in a batch that still merges
    seq_lens, kv_heads, group, head_dim = [1300, 500, 20], 2, 2, 32
    g = torch.Generator().manual_seed(3)
    need = [-(-n // 16) for n in seq_lens]
    pool = torch.randperm(sum(need), generator=g).tolist()
    tables = [pool[sum(need[:i]) : sum(need[: i + 1])] for i in range(len(need))]
    kv = PagedKVCache(1, len(pool), 16, kv_heads, head_dim, device=DEVICE)
    kv.k[0].copy_(torch.randn(kv.k[0].shape, generator=g))
    kv.v[0].copy_(torch.randn(kv.v[0].shape, generator=g))
    q = torch.randn(3, kv_heads * group, head_dim, generator=g).to(DEVICE)
    attn = PagedAttention(kv, tables, seq_lens, [0, 1, 2, 3])
    lens = torch.tensor(seq_lens, device=DEVICE)
    got = split_decode_attention(q, kv.k[0], kv.v[0], attn.block_tables, lens, 1300, 0.2, 32)
    want = paged_decode_attention(q, kv, 0, tables, seq_lens, 0.2)
    assert -(-1300 // 32) > 2 * MERGE_CHUNK
    assert (got - want).abs().max().item() < TOL


@needs_triton
def test_the_segment_minimises_the_busiest_multiprocessors_walk():
    from minillm.kernels.split_decode import MERGE_KEYS, MIN_SPLIT_GAIN, SEGMENT, decode_segment
    from minillm.kernels.traffic import split_decode_traffic

    def busiest(batch, context, segment):  # traffic.py's model: waves x longest walk
        cost = split_decode_traffic([context] * batch, 16, 8, 128, segment)
        return cost.waves(132) * cost.longest_walk

    # Qwen3-0.6B's 8 KV heads on an H100 SXM's 132 multiprocessors:
    # (batch, context, segment picked, the best split's busiest walk, the unsplit one's)
    cases = [
        (1, 32768, 2048, 2048, 32768),  # 8 programs unsplit: 128 of 2,048 keys, one wave
        (17, 32768, 1024, 33792, 65536),  # 136 unsplit: a second wave of 4 programs
        (20, 16384, 512, 19968, 32768),  # 160 unsplit: a second wave of 28
        (64, 4096, 4096, 16128, 16384),  # 4 waves, the last of 116: 16,128 + the merge > 16,384
        (128, 2048, 2048, 16128, 16384),  # the same 1.02x: unsplit
        (132, 4096, 4096, 32768, 32768),  # 1,056 = 8 full waves: a split gains nothing
    ]
    for batch, context, segment, walk, unsplit in cases:
        picked = decode_segment([context] * batch, 8, 132)
        assert picked == segment, (batch, context, picked)
        assert busiest(batch, context, context) == unsplit
        # the best split: SEGMENT doubled up to the context
        splits = [SEGMENT << k for k in range(8) if SEGMENT << k < context]
        assert min(busiest(batch, context, s) for s in splits) == walk
        if picked < context:
            assert busiest(batch, context, picked) == walk
        assert (picked < context) == (unsplit >= MIN_SPLIT_GAIN * (walk + MERGE_KEYS))
    assert decode_segment([4000] * 64, 8, 132) == 4000  # unsplit, in whole 32-key tiles
    assert decode_segment([4001] * 64, 8, 132) == 4032
    assert decode_segment([200], 8, 132) == 224  # shorter than SEGMENT: never split


@needs_triton
def test_a_lone_short_context_stays_unsplit_and_a_long_one_splits():
    from minillm.kernels.split_decode import (
        MERGE_KEYS,
        MIN_SPLIT_GAIN,
        busiest_walk,
        decode_segment,
    )

    # one context: split in 256-key segments, the busiest SM walks 256 keys, plus the merge's
    # MERGE_KEYS; unsplit, the whole context. (256 + 256) x 1.25 = 640: shorter ones stay whole
    assert MERGE_KEYS == 256 and MIN_SPLIT_GAIN == 1.25
    assert decode_segment([320], 8, 132) == 320  # 320 keys: one launch, no merge
    assert decode_segment([331], 8, 132) == 352
    assert decode_segment([608], 8, 132) == 608  # whole: a lone context splits from 640 keys
    assert decode_segment([639], 8, 132) == 640  # the longest left whole (one padded segment)
    assert decode_segment([640], 8, 132) == 256  # 640 >= 640: split
    assert decode_segment([1000, 90], 8, 132) == 256
    assert busiest_walk([32768], 2048, 8, 132) == 2048
    assert decode_segment([32768], 8, 132) == 2048  # 2,048 + 256 keys against 32,768


@needs_triton
def test_the_segment_counts_each_context_at_its_own_length():
    from minillm.kernels.split_decode import busiest_walk, decode_segment

    # one 32K request among 63 of 100 tokens: taken as 64 x 32K, unsplit is 512 programs over
    # 132 multiprocessors and no split gains more than 1.03x; at their own lengths, 2,048-key
    # segments give 128 programs of 2,048 keys and 504 of 100 beside them
    lens = [32768] + [100] * 63
    assert decode_segment([32768] * 64, 8, 132) == 32768
    assert decode_segment(lens, 8, 132) == 2048
    assert busiest_walk(lens, 32768, 8, 132) == 32768
    assert busiest_walk(lens, 2048, 8, 132) == 2448  # the 504 short ones, 4 SMs' worth


@needs_triton
def test_a_long_context_among_many_short_ones_stays_unsplit():
    from minillm.kernels.split_decode import MIN_SPLIT_GAIN, busiest_walk, decode_segment

    # 1 x 2,048 + 400 x 300 on 8 KV heads, 132 SMs: charged waves x the longest program,
    # 256-key segments would cut the walk 4.08x (51,200 -> 12,544 keys); dealt longest first,
    # the 3,200 short programs fill the SMs either way: 7,500 keys unsplit, 7,412 split
    lens = [2048] + [300] * 400
    waves = {
        s: -(-8 * sum(-(-n // s) for n in lens) // 132) * min(s, 2048) for s in (2048, 256)
    }
    assert waves == {2048: 51200, 256: 12544}
    unsplit, split = busiest_walk(lens, 2048, 8, 132), busiest_walk(lens, 256, 8, 132)
    assert (unsplit, split) == (7500, 7412) and unsplit < MIN_SPLIT_GAIN * split
    assert decode_segment(lens, 8, 132) == 2048


@needs_triton
@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(1, 40_000), min_size=1, max_size=70),
    segment=st.sampled_from([256, 512, 1024, 2048, 40_000]),
    kv_heads=st.sampled_from([1, 2, 8]),
    sms=st.sampled_from([1, 7, 132]),
)
def test_the_busiest_walk_lies_between_the_even_spread_and_one_program_more(
    lens, segment, kv_heads, sms
):
    from minillm.kernels.split_decode import busiest_walk

    programs = [min(segment, n - start) for n in lens for start in range(0, n, segment)]
    programs = programs * kv_heads
    longest, total = max(programs), sum(programs)
    walk = busiest_walk(lens, segment, kv_heads, sms)
    assert max(longest, -(-total // sms)) <= walk <= total / sms + longest


def random_decode_case(seq_lens, kv_heads, group, head_dim, g):
    """A decode step over random K/V in blocks of 16 scattered through one layer's pool: (the
    cache, the block tables, q [B, H, hd]), drawn from the generator g."""
    need = [-(-n // 16) for n in seq_lens]  # blocks per request
    pool = torch.randperm(sum(need), generator=g).tolist()
    tables = [pool[sum(need[:i]) : sum(need[: i + 1])] for i in range(len(seq_lens))]
    kv = PagedKVCache(1, len(pool), 16, kv_heads, head_dim, device=DEVICE)
    kv.k[0].copy_(torch.randn(kv.k[0].shape, generator=g))
    kv.v[0].copy_(torch.randn(kv.v[0].shape, generator=g))
    q = torch.randn(len(seq_lens), kv_heads * group, head_dim, generator=g).to(DEVICE)
    return kv, tables, q


@needs_triton
def test_an_unsplit_decode_step_is_one_launch_and_equals_the_reference():
    from minillm.kernels.backend import TritonAttention
    from minillm.kernels.split_decode import decode_segment
    from minillm.kernels.triton_runtime import multiprocessors

    kv_heads, group, head_dim = 8, 2, 16
    batch = -(-multiprocessors(DEVICE) // kv_heads)  # enough (request, KV head) programs
    g = torch.Generator().manual_seed(5)
    seq_lens = [int(n) for n in torch.randint(1, 300, (batch,), generator=g)]
    kv, tables, q = random_decode_case(seq_lens, kv_heads, group, head_dim, g)
    attn = TritonAttention(kv, tables, seq_lens, list(range(batch + 1)))
    assert attn.segment == decode_segment(seq_lens, kv_heads, multiprocessors(DEVICE))
    assert attn.segment >= max(seq_lens)  # one segment per context
    got = attn.decode(0, q, 0.25)
    want = paged_decode_attention(q, kv, 0, tables, seq_lens, 0.25)
    assert (got - want).abs().max().item() < TOL
    if interpreting():
        from minillm.kernels.traffic import count_traffic

        with count_traffic() as counted:
            attn.decode(0, q, 0.25)
        assert counted.launches == 1  # the segment kernel alone, no merge
        assert counted.programs == batch * kv_heads


@needs_triton
def test_a_split_decode_step_is_two_launches_and_equals_the_reference():
    from minillm.kernels.backend import TritonAttention
    from minillm.kernels.split_decode import SEGMENT, decode_segment
    from minillm.kernels.triton_runtime import multiprocessors

    # 8 KV heads, contexts of 1,000 and 90: (4 + 1) x 8 = 40 programs in segments of 256, one
    # wave walking 256 keys (+ the merge's 256) against 1,024 unsplit: the backend splits
    kv_heads, group, head_dim, seq_lens = 8, 2, 16, [1000, 90]
    g = torch.Generator().manual_seed(6)
    kv, tables, q = random_decode_case(seq_lens, kv_heads, group, head_dim, g)
    attn = TritonAttention(kv, tables, seq_lens, [0, 1, 2])
    assert attn.decode_only
    assert attn.segment == decode_segment(seq_lens, kv_heads, multiprocessors(DEVICE))
    assert attn.segment == SEGMENT < max(seq_lens)  # split: 4 segments and 1
    got = attn.decode(0, q, 0.25)
    want = paged_decode_attention(q, kv, 0, tables, seq_lens, 0.25)
    assert (got - want).abs().max().item() < TOL
    if interpreting():
        from minillm.kernels.traffic import count_traffic

        with count_traffic() as counted:
            attn.decode(0, q, 0.25)
        assert counted.launches == 2  # the segment kernel, then the merge
        # grids (B, KV, segments of the longest) and (B, H)
        assert counted.programs == 2 * kv_heads * 4 + 2 * kv_heads * group


@needs_triton
def test_flash_decoding_refuses_a_segment_that_is_not_whole_tiles():
    from minillm.kernels.split_decode import split_decode_attention

    q, kv, tables, seq_lens, _, scale = random_case(0)
    with pytest.raises(ValueError, match="segment is 48: expected a multiple of 32"):
        split_decode_attention(
            q[:1],
            kv.k[0],
            kv.v[0],
            torch.zeros(1, 1, dtype=torch.long),
            torch.ones(1),
            1,
            scale,
            48,
        )


@needs_triton
def test_kernel_reads_only_the_requests_blocks():
    """Poison every block no table lists: a kernel that strays outside its block table returns
    NaN."""
    from minillm.kernels.backend import triton_attention

    q, kv, tables, seq_lens, qsl, scale = random_case(5)
    used = {b for t in tables for b in t}
    for b in set(range(kv.num_blocks)) - used:
        kv.k[0][b], kv.v[0][b] = float("nan"), float("nan")
    for t, s in zip(tables, seq_lens):  # and the unused tail of each last block
        kv.k[0][t[-1], (s - 1) % kv.block_size + 1 :] = float("nan")
        kv.v[0][t[-1], (s - 1) % kv.block_size + 1 :] = float("nan")
    got = triton_attention(q, kv, 0, tables, seq_lens, qsl, scale)
    assert torch.isfinite(got).all()


@needs_triton
@pytest.mark.parametrize("block_size,kv_heads,head_dim", [(1, 1, 16), (4, 2, 48), (16, 3, 128)])
def test_cache_write_equals_torch_store_exactly(block_size, kv_heads, head_dim):
    from minillm.kernels.cache_write import triton_cache_write

    g = torch.Generator().manual_seed(block_size)
    ours, ref = (
        PagedKVCache(1, 9, block_size, kv_heads, head_dim, device=DEVICE) for _ in range(2)
    )
    for cache in (
        ours,
        ref,
    ):  # the same old contents, so rows the write must not touch are checked too
        torch.manual_seed(0)
        cache.k[0].normal_(), cache.v[0].normal_()
    slots = torch.randperm(ours.num_slots, generator=g)[: min(7, ours.num_slots)].to(DEVICE)
    k, v = (
        torch.randn(len(slots), kv_heads, head_dim, generator=g).to(DEVICE) for _ in range(2)
    )
    k_in, v_in = k.clone(), v.clone()
    triton_cache_write(k, v, ours.k[0], ours.v[0], slots)
    ref.store(0, slots, k, v)
    assert torch.equal(ours.k[0], ref.k[0]) and torch.equal(ours.v[0], ref.v[0])
    assert torch.equal(k, k_in) and torch.equal(v, v_in)


@needs_triton
def test_cache_write_skips_negative_slots():
    from minillm.kernels.cache_write import triton_cache_write

    kv = PagedKVCache(1, 2, 4, 2, 16, device=DEVICE)
    k = torch.ones(3, 2, 16, device=DEVICE)
    triton_cache_write(
        k, 2 * k, kv.k[0], kv.v[0], torch.tensor([5, -1, 0], device=DEVICE)
    )  # -1: vLLM's padding slot
    flat_k, flat_v = kv.k[0].view(8, 2, 16), kv.v[0].view(8, 2, 16)
    assert flat_k[[0, 5]].eq(1).all() and flat_v[[0, 5]].eq(2).all()
    assert flat_k[[1, 2, 3, 4, 6, 7]].eq(0).all() and flat_v[[1, 2, 3, 4, 6, 7]].eq(0).all()


# --- the whole runner with the Triton backend
#   -------------------------------------------------------------


def two_step_logits(model, backend: str, block_size: int = 3):
    """Prefill, chunked prefill (10 of 22 tokens, then the rest) and decode over two steps, on
    scattered blocks."""
    rng = random.Random(0)
    a, b, c = ([rng.randrange(VOCAB) for _ in range(n)] for n in (11, 5, 22))
    pool = list(range(30))
    rng.shuffle(pool)
    tables = [pool[0:5], pool[5:8], pool[8:16]]
    kv = PagedKVCache.for_model(model, len(pool), block_size)
    runner = ModelRunner(model, kv, attention_backend=backend)
    out1 = runner.forward(
        build_batch(
            [(a, 0, tables[0], True), (b, 0, tables[1], True), (c[:10], 0, tables[2], False)],
            block_size,
        )
    )
    out2 = runner.forward(
        build_batch(
            [
                ([7], len(a), tables[0], True),
                ([9], len(b), tables[1], True),
                (c[10:], 10, tables[2], True),
            ],
            block_size,
        )
    )
    return [(a, out1[0]), (b, out1[1]), (a + [7], out2[0]), (b + [9], out2[1]), (c, out2[2])]


@needs_triton
def test_runner_with_triton_backend_equals_torch_backend_and_transformers(tiny_checkpoint):
    from minillm.checks.reference import hf_logits

    path = tiny_checkpoint(seed=11)
    model = Transformer.from_pretrained(path, device=DEVICE)
    triton_rows, torch_rows = two_step_logits(model, "triton"), two_step_logits(model, "torch")
    worst_torch = max((t[1] - r[1]).abs().max().item() for t, r in zip(triton_rows, torch_rows))
    worst_hf = max(
        (row.cpu() - hf_logits(path, ids)[-1]).abs().max().item() for ids, row in triton_rows
    )
    print(
        f"runner, triton vs torch backend: {worst_torch:.1e}; vs transformers: {worst_hf:.1e}"
    )
    assert worst_torch < 1e-4 and worst_hf < 1e-4


@needs_triton
def test_engine_with_triton_backend_generates_the_torch_backends_tokens(tiny_checkpoint):
    from minillm.engine import LLMEngine
    from minillm.sampling import SamplingParams

    model = Transformer.from_pretrained(tiny_checkpoint(seed=11), device=DEVICE)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [100, 200, 300]]
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    outs = {
        backend: [
            o.token_ids
            for o in LLMEngine(
                model, block_size=4, num_blocks=16, attention_backend=backend
            ).generate(prompts, params)
        ]
        for backend in ("torch", "triton")
    }
    assert outs["triton"] == outs["torch"] and all(len(t) == 4 for t in outs["torch"])


@needs_triton
def test_engine_splits_the_decode_steps_of_a_long_prompt_and_keeps_the_torch_tokens(
    tiny_checkpoint,
):
    from minillm.engine import LLMEngine
    from minillm.kernels.backend import TritonAttention
    from minillm.sampling import SamplingParams

    steps = []  # (decode_only, segment, max_seq_len) of every step's backend

    class RecordedAttention(TritonAttention):
        def __init__(self, *args):
            super().__init__(*args)
            steps.append((self.decode_only, self.segment, self.max_seq_len))

    model = Transformer.from_pretrained(tiny_checkpoint(seed=11), device=DEVICE)
    # contexts of 701 and 702 keys: split into segments of 256 ((256 + MERGE_KEYS) x 1.25 =
    # 640 <= 704 unsplit)
    prompts = [[5 + i % 50 for i in range(700)], [100, 200, 300]]
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    outs = {}
    for backend in ("torch", "triton"):
        engine = LLMEngine(model, block_size=16, num_blocks=48, attention_backend=backend)
        if backend == "triton":
            engine.runner.backend_class = RecordedAttention
        outs[backend] = [o.token_ids for o in engine.generate(prompts, params)]
    decodes = [(segment, longest) for only, segment, longest in steps if only]
    assert len(decodes) == 2 and all(segment < longest for segment, longest in decodes)
    assert outs["triton"] == outs["torch"]


# --- choosing the backend
#   ------------------------------------------------------------------------------------


def test_unknown_backend_is_refused_by_name(tiny_model):
    from minillm.engine import LLMEngine

    model = tiny_model(seed=11)
    kv = PagedKVCache.for_model(model, 4, 4)
    with pytest.raises(
        ValueError, match=r"attention_backend is 'cuda': expected one of 'torch', 'triton'"
    ):
        ModelRunner(model, kv, attention_backend="cuda")
    with pytest.raises(ValueError, match=r"attention_backend is 'flash'"):
        LLMEngine(model, block_size=4, num_blocks=4, attention_backend="flash")


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    full.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
        cwd=ROOT,
    )


BLOCK_TRITON = """
import sys, importlib.abc
class NoTriton(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoTriton())
import importlib.util
importlib.util.find_spec = lambda name, *a: (
    None if name.split(".")[0] == "triton" else _find(name, *a))
"""


def test_without_triton_everything_else_works_and_the_error_says_how_to_install():
    code = (
        "import importlib.util; _find = importlib.util.find_spec\n"
        + BLOCK_TRITON
        + """
import minillm.engine, minillm.runner, minillm.cli
from minillm.kernels import attention_backend_class
assert attention_backend_class("torch").__name__ == "PagedAttention"
try:
    attention_backend_class("triton")
except ImportError as e:
    print("ERROR:", e)
sys.exit(minillm.cli.main(["check", "--attention", "triton"]))
"""
    )
    done = run_python(code)
    assert "ERROR: the Triton attention backend needs the triton package" in done.stdout, (
        done.stderr
    )
    assert "pip install -e '.[kernels]'" in done.stdout
    assert done.returncode == 2 and "--attention triton: triton is not installed" in done.stdout


@needs_triton
@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the CPU-only choice of the interpreter"
)
def test_without_cuda_the_backend_chooses_the_interpreter_unless_told_otherwise():
    done = run_python(
        "import os; import minillm.kernels.backend; print(os.environ.get('TRITON_INTERPRET'))"
    )
    assert done.stdout.strip() == "1", done.stderr
    code = """
from minillm.paged import PagedKVCache
from minillm.kernels.backend import TritonAttention
try:
    TritonAttention(PagedKVCache(1, 2, 4, 1, 16), [[0]], [1], [0, 1])
except ValueError as e:
    print("ERROR:", e)
"""
    done = run_python(code, TRITON_INTERPRET="0")
    assert "ERROR: the Triton backend got a cache on the CPU" in done.stdout, done.stderr


@needs_triton
@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the CPU-only choice of the interpreter"
)
def test_a_model_built_before_the_backend_still_runs_the_interpreted_kernel():
    """Building a model imports triton through torch (torch._dynamo, on the meta device) before
    any kernel module: the interpreter must be chosen by then, when minillm is imported."""
    code = """
from minillm.checkpoints import default_model_path
from minillm.engine import LLMEngine
from minillm.model import Transformer
from minillm.sampling import SamplingParams
model = Transformer.from_pretrained(default_model_path())
engine = LLMEngine(model, block_size=4, num_blocks=8, attention_backend="triton")
print(engine.generate([[1, 2, 3]], SamplingParams(max_tokens=2, ignore_eos=True))[0].token_ids)
"""
    done = run_python(code)
    assert done.returncode == 0 and done.stdout.startswith("["), done.stderr[-2000:]


@needs_triton
@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the CPU-only choice of the interpreter"
)
def test_triton_imported_before_minillm_is_a_clear_error():
    code = """
import torch
with torch.device("meta"):
    torch.nn.Embedding(4, 4)  # torch imports triton here, before the interpreter is chosen
from minillm.kernels import load_triton
try:
    load_triton()
except ImportError as e:
    print("ERROR:", e)
"""
    done = run_python(code)
    assert "ERROR: triton was imported before TRITON_INTERPRET=1 was set" in done.stdout, (
        done.stdout + done.stderr[-2000:]
    )


@needs_triton
def test_a_kernel_is_shown_by_its_python_source():
    from minillm.kernels.cache_write import reshape_and_cache_kernel
    from minillm.notebook.show import source

    shown = source(reshape_and_cache_kernel)
    assert (
        shown.text.startswith("@triton.jit\ndef reshape_and_cache_kernel(")
        and "tl.store" in shown.text
    )
    assert shown.where() == "minillm/kernels/cache_write.py"


@needs_triton
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_kernel_in_bf16_is_close_to_the_fp32_reference():
    """bf16 rounds each input to 2^-8 of itself: outputs of size ~1 may be off by a few
    hundredths, not more."""
    from minillm.kernels.backend import triton_attention

    for seed in range(4):
        q, kv, tables, seq_lens, qsl, scale = random_case(seed)
        want = paged_attention(q, kv, 0, tables, seq_lens, qsl, scale)
        low = PagedKVCache(
            1,
            kv.num_blocks,
            kv.block_size,
            kv.num_kv_heads,
            kv.head_dim,
            torch.bfloat16,
            kv.device,
        )
        low.k[0].copy_(kv.k[0]), low.v[0].copy_(kv.v[0])
        got = triton_attention(q.bfloat16(), low, 0, tables, seq_lens, qsl, scale).float()
        assert (got - want).abs().max().item() < 5e-2


def run_benchmark(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "attention.py"), *args],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(ROOT)),
        timeout=300,
        cwd=ROOT,
    )


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks what the benchmark does without a GPU"
)
def test_benchmark_without_cuda_says_so_and_exits_0():
    done = run_benchmark()
    assert done.returncode == 0, done.stderr
    assert "no CUDA device here" in done.stdout or "needs triton" in done.stdout


@needs_triton
@pytest.mark.skipif(
    torch.cuda.is_available(), reason="the smoke run is for machines without a GPU"
)
def test_benchmark_smoke_run_checks_the_kernel_against_the_reference(tmp_path):
    done = run_benchmark("--cpu-smoke", "--json", str(tmp_path / "rows.json"))
    assert done.returncode == 0, done.stderr
    import json

    saved = json.loads((tmp_path / "rows.json").read_text())
    rows, mixed = saved["rows"], saved["mixed_rows"]
    assert [(r["batch"], r["context"]) for r in rows] == [(1, 40), (3, 40)]
    assert all(r["err_triton"] < 1e-5 and r["err_sdpa"] < 1e-5 for r in rows)
    # a prefill of 20 and a chunk of 8 after 40, each beside 3 decodes of 40: one launch,
    # the torch loop and the SDPA loop agree
    assert [(r["step"], r["tokens"]) for r in mixed] == [("20:0+3x40", 23), ("8:40+3x40", 11)]
    assert all(r["err_triton"] < 1e-5 and r["err_sdpa"] < 1e-5 for r in mixed)
    # operations: 4 x head_dim x heads per visible key; the prefill's 20 tokens see 210 keys
    assert mixed[0]["flops"] == 4 * 32 * 4 * (210 + 3 * 40)


def test_benchmark_refuses_a_malformed_mixed_step():
    done = run_benchmark("--mixed-steps", "2000+64x4096")
    assert done.returncode == 2
    assert "expected NEW:CACHED+BxL" in done.stderr


def test_check_refuses_an_unknown_attention_backend(capsys):
    from minillm.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["check", "--attention", "flash"])
    assert stop.value.code == 2
    assert "invalid choice: 'flash'" in capsys.readouterr().err
