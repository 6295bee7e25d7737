"""Tests for paged_attention, against dense causal attention on each request's own tokens."""

import torch

from grading import check_close
from minillm.model import causal_attention
from minillm.paged import PagedKVCache, slot_mapping_for

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 4, 2, 8, 4
SCALE = HEAD_DIM**-0.5


def build(requests, seed=0, stale=0.0):
    """requests: (num_cached, num_new, block_table). Returns the pool, the flat q, the metadata, and per
    request the dense q, k, v [1, S or n, heads, hd] of its whole context, for the reference."""
    g = torch.Generator().manual_seed(seed)
    kv = PagedKVCache(1, 16, BLOCK, KV_HEADS, HEAD_DIM)
    if stale:
        kv.k[0].fill_(stale), kv.v[0].fill_(stale)  # whatever an earlier owner of the blocks left behind
    qs, dense, query_start_loc, seq_lens = [], [], [0], []
    for cached, new, table in requests:
        S = cached + new
        k, v = torch.randn(S, KV_HEADS, HEAD_DIM, generator=g), torch.randn(S, KV_HEADS, HEAD_DIM, generator=g)
        q = torch.randn(new, HEADS, HEAD_DIM, generator=g)
        kv.write(0, torch.tensor(slot_mapping_for(table, list(range(S)), BLOCK)), k, v)
        qs.append(q)
        dense.append((q[None], k[None], v[None]))
        query_start_loc.append(query_start_loc[-1] + new)
        seq_lens.append(S)
    tables = [list(t) for _, _, t in requests]
    return kv, torch.cat(qs), tables, seq_lens, query_start_loc, dense


def run(learner, kv, q, tables, seq_lens, query_start_loc):
    return learner.paged_attention(q, kv.k[0], kv.v[0], tables, seq_lens, query_start_loc, SCALE)


def expected(dense):
    return torch.cat([causal_attention(q, k, v, SCALE)[0] for q, k, v in dense])


def test_prefill_matches_dense_causal_attention(learner):
    """A whole prompt (n = seq_len): ordinary causal attention over keys gathered from the block table."""
    kv, q, *meta, dense = build([(0, 7, [5, 2])])
    check_close(run(learner, kv, q, *meta), expected(dense), "a 7-token prefill in blocks [5, 2]", atol=1e-5)


def test_decode_sees_the_whole_history(learner):
    """One new token is the last of its context: it sees all seq_len keys (the mask is aligned to the end)."""
    kv, q, *meta, dense = build([(10, 1, [3, 0, 7])])
    check_close(run(learner, kv, q, *meta), expected(dense), "a decode step with 11 tokens of context", atol=1e-5)


def test_chunk_mask_is_aligned_to_the_end(learner):
    """n new tokens after c cached: new token j is at position c + j and sees keys 0 .. c + j."""
    kv, q, *meta, dense = build([(6, 4, [1, 4, 6])])
    check_close(run(learner, kv, q, *meta), expected(dense), "a 4-token chunk after 6 cached tokens", atol=1e-5)


def test_requests_in_one_batch_do_not_see_each_other(learner):
    """Each request reads only its own blocks and owns rows query_start_loc[i] : query_start_loc[i+1] of q."""
    kv, q, *meta, dense = build([(0, 5, [6, 1]), (8, 1, [3, 0, 7]), (4, 3, [2, 5])], seed=1)
    check_close(run(learner, kv, q, *meta), expected(dense), "a batch of prefill 5, decode at 9, chunk of 3 after 4",
                atol=1e-5)


def test_blocks_are_read_in_block_table_order(learner):
    """The table [9, 3, 12] means positions 0-3 are in block 9, 4-7 in block 3, 8-9 in block 12."""
    kv, q, *meta, dense = build([(0, 10, [9, 3, 12])], seed=2)
    check_close(run(learner, kv, q, *meta), expected(dense), "a prefill in blocks [9, 3, 12]", atol=1e-5)


def test_stale_slots_past_seq_len_are_ignored(learner):
    """The last block is only partly filled: read seq_len tokens, not whole blocks."""
    kv, q, *meta, dense = build([(5, 1, [8, 2]), (0, 3, [4])], seed=3, stale=50.0)
    check_close(run(learner, kv, q, *meta), expected(dense), "attention with stale values in the unused slots",
                atol=1e-5)


def test_query_heads_share_kv_heads_in_consecutive_groups(learner):
    """Query head h uses KV head h // (heads // kv_heads): heads 0, 1 read KV head 0 and heads 2, 3 KV head 1."""
    kv, q, *meta, dense = build([(0, 3, [0])], seed=4)
    kv.v[0][..., 0, :] = 1.0  # every value of KV head 0 is 1, of KV head 1 is -1
    kv.v[0][..., 1, :] = -1.0
    got = run(learner, kv, q, *meta)
    want = torch.ones_like(q)
    want[:, 2:] = -1.0  # attention averages values: heads 0-1 give 1, heads 2-3 give -1
    check_close(got, want, "the output per query head when KV head 0 holds 1s and KV head 1 holds -1s", atol=1e-5)
