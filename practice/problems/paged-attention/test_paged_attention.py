"""Tests for paged_attention: against dense float64 attention on each request's own tokens and
against minillm's per-request reference, over head groupings (powers of two or not), head sizes,
block sizes, scales and random mixes of prefills, chunks and decodes, with shuffled block tables
and NaN in every slot a request does not own (block 0, the natural filler, included); and a
check that the work is one batched call, not a loop over the requests."""

import random

import pytest
import torch
from grading import check_close

from minillm.paged import PagedKVCache
from minillm.paged import paged_attention as reference

NAN = float("nan")


def build(
    requests,
    heads=4,
    kv_heads=2,
    head_dim=8,
    block_size=4,
    num_blocks=40,
    seed=0,
    extra_blocks=0,
    reserve_block_0=False,
):
    """requests: (num_cached, num_new) each. Returns q, the pool, the metadata and per request
    the dense
    (q [n, H, hd], k, v [S, KV, hd]) of its context, for the reference. Unused slots hold
    NaN."""
    g, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    k_cache = torch.full((num_blocks, block_size, kv_heads, head_dim), NAN)
    v_cache = torch.full((num_blocks, block_size, kv_heads, head_dim), NAN)
    free = list(
        range(1 if reserve_block_0 else 0, num_blocks)
    )  # block 0 reserved: NaN, unowned
    rng.shuffle(free)
    qs, dense, tables, query_start_loc, seq_lens = [], [], [], [0], []
    for cached, new in requests:
        S = cached + new
        table = [
            free.pop() for _ in range(-(-S // block_size) + extra_blocks)
        ]  # extra blocks: allocated, unused
        k, v = (
            torch.randn(S, kv_heads, head_dim, generator=g),
            torch.randn(S, kv_heads, head_dim, generator=g),
        )
        for p in range(S):
            k_cache[table[p // block_size], p % block_size] = k[p]
            v_cache[table[p // block_size], p % block_size] = v[p]
        q = torch.randn(new, heads, head_dim, generator=g)
        qs.append(q)
        dense.append((q, k, v))
        tables.append(table)
        query_start_loc.append(query_start_loc[-1] + new)
        seq_lens.append(S)
    return torch.cat(qs), k_cache, v_cache, tables, seq_lens, query_start_loc, dense


def expected(dense, scale):
    """Each request alone: its n queries are its last n positions and see keys 0 .. their own
    position."""
    out = []
    for q, k, v in dense:
        n, S, group = q.shape[0], k.shape[0], q.shape[1] // k.shape[1]
        k, v = (
            k.double().repeat_interleave(group, dim=1),
            v.double().repeat_interleave(group, dim=1),
        )
        scores = torch.einsum("nhd,shd->hns", q.double(), k) * scale
        sees = torch.ones(n, S, dtype=torch.bool).tril(diagonal=S - n)
        out.append(
            torch.einsum("hns,shd->nhd", scores.masked_fill(~sees, -torch.inf).softmax(-1), v)
        )
    return torch.cat(out).float()


def run(learner, q, k_cache, v_cache, tables, seq_lens, query_start_loc, scale):
    return learner.paged_attention(
        q, k_cache, v_cache, tables, seq_lens, query_start_loc, scale
    )


def check(learner, requests, what, scale=8**-0.5, **sizes):
    q, k_cache, v_cache, tables, seq_lens, qsl, dense = build(requests, **sizes)
    check_close(
        run(learner, q, k_cache, v_cache, tables, seq_lens, qsl, scale),
        expected(dense, scale),
        what,
        atol=1e-5,
    )


def test_prefill_is_ordinary_causal_attention(learner):
    """A whole prompt (n = seq_len): causal attention over keys gathered through the block
    table."""
    check(learner, [(0, 7)], "a 7-token prefill")


def test_decode_sees_the_whole_history(learner):
    """One new token is the last of its context: it sees all seq_len keys (the mask is aligned
    to the end)."""
    check(learner, [(10, 1)], "a decode step with 11 tokens of context")


def test_chunk_mask_is_aligned_to_the_end(learner):
    """n new tokens after c cached: new token j is at position c + j and sees keys 0 .. c
    + j."""
    check(learner, [(6, 4)], "a 4-token chunk after 6 cached tokens")


def test_requests_in_one_batch_do_not_see_each_other(learner):
    """Each request reads only its own blocks and owns rows query_start_loc[i] :
    query_start_loc[i+1] of q."""
    check(
        learner,
        [(0, 5), (8, 1), (4, 3)],
        "a batch of prefill 5, decode at 9, chunk of 3 after 4",
        seed=1,
    )


def test_only_the_blocks_the_context_needs_are_read(learner):
    """A table may list more blocks than seq_len needs (they hold NaN here): read ceil(seq_len /
    block_size) of them."""
    check(
        learner,
        [(5, 1), (0, 3)],
        "requests whose tables hold an unused block each",
        seed=2,
        extra_blocks=1,
    )


def test_stale_slots_past_seq_len_are_never_read(learner):
    """The last block is only partly filled and the rest may hold anything, even NaN: take
    seq_len tokens, do not mask."""
    check(
        learner,
        [(5, 1), (0, 3), (2, 7)],
        "attention with NaN in every slot past seq_len",
        seed=3,
        block_size=8,
    )


def test_query_heads_share_kv_heads_in_consecutive_groups(learner):
    """Query head h uses KV head h // (heads // kv_heads): with 6 heads over 2 KV heads, heads
    0-2 read KV head 0."""
    q, k_cache, v_cache, tables, seq_lens, qsl, dense = build(
        [(0, 3)], heads=6, kv_heads=2, seed=4
    )
    v_cache[..., 0, :] = (
        1.0  # every value of KV head 0 is 1, of KV head 1 is -1 (attention averages them)
    )
    v_cache[..., 1, :] = -1.0
    want = torch.ones_like(q)
    want[:, 3:] = -1.0
    check_close(
        run(learner, q, k_cache, v_cache, tables, seq_lens, qsl, 0.3),
        want,
        "the output per query head when KV head 0 holds 1s and KV head 1 holds -1s",
        atol=1e-5,
    )


CONFIGS = [  # requests, heads, kv_heads, head_dim, block_size, scale
    ([(0, 9), (3, 1), (17, 5)], 4, 4, 16, 1, 0.25),
    ([(30, 1), (31, 1), (2, 1)], 6, 2, 8, 3, 8**-0.5),
    ([(12, 12), (0, 1)], 8, 2, 12, 5, 1.7),
    ([(40, 2), (7, 9), (0, 4), (1, 1)], 10, 2, 6, 16, 0.05),
    ([(64, 1)], 3, 1, 32, 7, 32**-0.5),
]


@pytest.mark.parametrize("case", range(len(CONFIGS)))
def test_any_grouping_block_size_and_scale(learner, case):
    """Any head grouping, head size, block size and scale (use the scale you are given, not
    1/sqrt(head_dim))."""
    requests, heads, kv_heads, head_dim, block_size, scale = CONFIGS[case]
    check(
        learner,
        requests,
        f"requests {requests} with {heads} heads over {kv_heads} KV heads of {head_dim}, "
        f"block_size {block_size}, scale {scale:g}",
        scale=scale,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        block_size=block_size,
        seed=10 + case,
    )


def random_mix(rng, num_requests, max_context):
    """(num_cached, num_new) per request: prefills, chunks and decodes in random order."""
    mix = []
    for _ in range(num_requests):
        kind, S = rng.choice(["prefill", "chunk", "decode"]), rng.randint(1, max_context)
        new = {"prefill": S, "chunk": rng.randint(1, S), "decode": 1}[kind]
        mix.append((S - new, new))
    return mix


MIXES = [  # seed, number of requests, heads, kv_heads, head_dim, block_size
    (20, 5, 4, 2, 8, 4),
    (21, 8, 6, 3, 8, 3),
    (22, 3, 8, 1, 16, 16),
    (23, 12, 4, 4, 4, 5),
]


@pytest.mark.parametrize("case", range(len(MIXES)))
def test_random_mixes_match_minillm(learner, case):
    """Any mix of prefills, chunks and decodes, NaN in every stale slot and in the filler
    block 0, GQA: the same as minillm's per-request reference, PagedAttention.varlen."""
    seed, B, heads, kv_heads, head_dim, block_size = MIXES[case]
    requests = random_mix(random.Random(seed), B, 40)
    q, k_cache, v_cache, tables, seq_lens, qsl, _ = build(
        requests,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        block_size=block_size,
        num_blocks=B * 50 // block_size + 2 * B + 1,
        seed=seed,
        extra_blocks=case % 2,
        reserve_block_0=True,
    )
    kv = PagedKVCache(1, k_cache.shape[0], block_size, kv_heads, head_dim)
    kv.k[0].copy_(k_cache)
    kv.v[0].copy_(v_cache)
    scale = head_dim**-0.5
    check_close(
        run(learner, q, k_cache, v_cache, tables, seq_lens, qsl, scale),
        reference(q, kv, 0, tables, seq_lens, qsl, scale),
        f"the random mix {requests} ((cached, new) per request) with {heads} heads over "
        f"{kv_heads} KV heads, block_size {block_size}",
        atol=1e-5,
    )
