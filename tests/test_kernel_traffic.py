"""Chapter 11: the bytes and programs counted in Triton's interpreter equal the ones
computed from the launch grid and loop bounds (minillm/kernels/traffic.py), for both
attention kernels."""

from __future__ import annotations

import random

import pytest
import torch

from minillm.kernels import interpreting, load_triton, triton_available
from minillm.paged import PagedAttention, PagedKVCache

pytestmark = pytest.mark.skipif(
    not triton_available(), reason="triton is not installed: pip install -e '.[kernels]'"
)
if triton_available():
    load_triton()  # the interpreter without CUDA, before any kernel is defined


def batch(seq_lens, query_lens, kv_heads, group, head_dim, block_size=16):
    need = [-(-n // block_size) for n in seq_lens]
    pool = list(range(sum(need) + 3))
    random.Random(1).shuffle(pool)
    tables = [pool[sum(need[:i]) : sum(need[: i + 1])] for i in range(len(seq_lens))]
    kv = PagedKVCache(1, len(pool), block_size, kv_heads, head_dim)
    kv.k[0].normal_(), kv.v[0].normal_()
    q = torch.randn(sum(query_lens), kv_heads * group, head_dim)
    qsl = [0]
    for n in query_lens:
        qsl.append(qsl[-1] + n)
    return q, kv, tables, qsl


needs_interpreter = pytest.mark.skipif(
    triton_available() and not interpreting(), reason="counting needs Triton's interpreter"
)


@needs_interpreter
def test_the_mixed_batch_kernel_reads_what_its_grid_and_loop_bounds_say():
    from minillm.kernels.backend import triton_attention
    from minillm.kernels.traffic import count_traffic, varlen_traffic

    seq_lens, query_lens, kv_heads, group, head_dim = [70, 40, 9], [1, 40, 3], 2, 3, 16
    q, kv, tables, qsl = batch(seq_lens, query_lens, kv_heads, group, head_dim)
    with count_traffic() as counted:
        triton_attention(q, kv, 0, tables, seq_lens, qsl, 0.25)
    model = varlen_traffic(seq_lens, query_lens, kv_heads * group, kv_heads, head_dim)
    assert counted.programs == model.programs == 3 * 3 * 6  # 3 requests x 3 tiles x 6 heads
    assert counted.busy["k_cache_ptr"] == model.busy_programs == (1 + 3 + 1) * 6
    assert counted.loaded["k_cache_ptr"] + counted.loaded["v_cache_ptr"] == model.kv_elements
    assert model.longest_walk == 70


@needs_interpreter
def test_a_decode_reads_its_kv_group_times_unpacked_and_once_packed():
    from minillm.kernels.backend import triton_attention
    from minillm.kernels.split_decode import split_decode_attention
    from minillm.kernels.traffic import count_traffic, split_decode_traffic, varlen_traffic

    seq_lens, kv_heads, group, head_dim = [300, 33], 2, 4, 16
    q, kv, tables, qsl = batch(seq_lens, [1, 1], kv_heads, group, head_dim)
    with count_traffic() as unpacked:
        triton_attention(q, kv, 0, tables, seq_lens, qsl, 0.25)
    attn = PagedAttention(kv, tables, seq_lens, qsl)
    with count_traffic() as packed:
        split_decode_attention(
            q, kv.k[0], kv.v[0], attn.block_tables, torch.tensor(seq_lens), 300, 0.25
        )
    assert unpacked.reload_factor("k_cache_ptr") == group
    assert packed.reload_factor("k_cache_ptr") == packed.reload_factor("v_cache_ptr") == 1.0
    assert len(packed.distinct["k_cache_ptr"]) == sum(seq_lens) * kv_heads * head_dim
    split = split_decode_traffic(seq_lens, kv_heads * group, kv_heads, head_dim)
    assert packed.busy["k_cache_ptr"] == split.busy_programs == (2 + 1) * kv_heads
    assert packed.loaded["k_cache_ptr"] * 2 == split.kv_elements
    varlen = varlen_traffic(seq_lens, [1, 1], kv_heads * group, kv_heads, head_dim)
    assert varlen.kv_elements == group * split.kv_elements


@needs_interpreter
def test_counting_stops_with_the_block():
    from minillm.kernels.backend import triton_attention
    from minillm.kernels.traffic import count_traffic

    q, kv, tables, qsl = batch([5], [5], 1, 1, 16)
    with count_traffic() as counted:
        triton_attention(q, kv, 0, tables, [5], qsl, 0.25)
    before = dict(counted.loaded)
    assert counted.launches == 1
    triton_attention(q, kv, 0, tables, [5], qsl, 0.25)
    assert counted.loaded == before and counted.launches == 1


def test_the_models_scale_to_a_real_model_without_running_it():
    from minillm.kernels.traffic import split_decode_traffic, varlen_traffic

    # Qwen3-0.6B: 16 query heads on 8 KV heads of 128; one request of 32K tokens decoding
    varlen = varlen_traffic([32768], [1], 16, 8, 128)
    split = split_decode_traffic([32768], 16, 8, 128)
    assert (varlen.busy_programs, varlen.waves(), varlen.longest_walk) == (16, 1, 32768)
    assert (split.busy_programs, split.waves(), split.longest_walk) == (1024, 8, 256)
    assert varlen.kv_bytes() == 2 * split.kv_bytes() == 2 * 2 * 32768 * 8 * 128 * 2


@pytest.mark.parametrize(
    "seq_lens, query_lens, kv_heads, group, block_size",
    [
        ([300, 90], [1, 1], 2, 4, 16),  # decode: the padded gathers, the rows past zeroed
        ([17], [1], 2, 4, 4),  # decode of one request: 3 padded rows
        ([17, 40], [1, 1], 1, 4, 16),  # decode with one KV head
        ([70, 40, 9], [1, 40, 3], 2, 3, 16),  # varlen: one attention call per request
    ],
)
def test_the_torch_reference_moves_what_its_code_says(
    seq_lens, query_lens, kv_heads, group, block_size
):
    from minillm.kernels.traffic import count_torch_ops, torch_reference_traffic

    q, kv, tables, qsl = batch(seq_lens, query_lens, kv_heads, group, 8, block_size)
    attn = PagedAttention(kv, tables, seq_lens, qsl)
    with count_torch_ops(kv.k[0], kv.v[0]) as counted:
        attn.decode(0, q, 0.25) if attn.decode_only else attn.varlen(0, q, 0.25)
    model = torch_reference_traffic(
        seq_lens, query_lens, kv_heads * group, kv_heads, 8, block_size
    )
    assert counted == model
    distinct = 2 * sum(seq_lens) * kv_heads * 8
    assert model.kv_read + model.kv_written > 2 * distinct  # at least one copy of every row


@needs_interpreter
def test_the_torch_store_takes_two_operations_and_the_cache_write_one_launch():
    from minillm.kernels.cache_write import triton_cache_write
    from minillm.kernels.traffic import count_torch_ops, count_traffic

    _, kv, _, _ = batch([40], [1], 2, 1, 8)
    k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    slots = torch.tensor([1, 17, 39])
    with count_torch_ops(kv.k[0], kv.v[0]) as store:
        kv.store(0, slots, k, v)
    assert store.operations == 2  # one index_copy_ for K, one for V
    assert [name for name, _, _ in store.ops] == ["aten.index_copy_.default"] * 2
    with count_traffic() as write:
        triton_cache_write(k, v, kv.k[0], kv.v[0], slots)
    assert write.launches == 1 and write.programs == 3  # a program per new token: K and V
    assert write.loaded["k_ptr"] == write.loaded["v_ptr"] == 3 * 2 * 8
