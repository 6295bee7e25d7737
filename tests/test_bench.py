"""The benchmark's parts: one projection rule for every path, the memory floor, the mixed workload."""

import json

import pytest
import torch
import torch.nn.functional as F

from minillm.bench import throughput as bench; from minillm.bench import floor as bench_floor; from minillm.bench import mixed as bench_mixed
from minillm.model import SKINNY_ROWS, ModelConfig, Transformer, linear


@pytest.mark.parametrize("rows", [1, 2, 3, SKINNY_ROWS, SKINNY_ROWS + 1, 33])
def test_linear_equals_f_linear_for_any_row_count(rows):
    g = torch.Generator().manual_seed(rows)
    w, x = torch.randn(96, 40, generator=g), torch.randn(rows, 40, generator=g)
    got = linear(x, w)
    assert got.shape == (rows, 96)
    assert torch.allclose(got, F.linear(x, w), rtol=1e-5, atol=1e-5)
    assert torch.allclose(linear(x.view(1, rows, 40), w)[0], got)  # batch dims are kept


def count_ops(fn) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages()}


def test_one_row_is_a_plain_matrix_vector_product():
    """A lone row goes through F.linear as it is (no copy, no second row): the fastest 1-row form measured."""
    w, x = torch.randn(64, 32), torch.randn(1, 32)
    ops = count_ops(lambda: linear(x, w))
    assert "aten::linear" in ops and "aten::expand" not in ops and "aten::cat" not in ops
    ops = count_ops(lambda: linear(torch.randn(4, 32), w))  # 2..SKINNY_ROWS rows: weight @ x.T
    assert "aten::linear" not in ops and "aten::mm" in ops


def tiny_cfg(tied: bool) -> ModelConfig:
    return ModelConfig(vocab_size=50, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=4, tie_word_embeddings=tied)


@pytest.mark.parametrize("tied", [True, False])
def test_decode_weight_bytes_counts_a_tied_head_once_and_skips_an_untied_embedding(tied):
    model = Transformer(tiny_cfg(tied))
    layer = 8 * 8 + 8 * 4 * 2 + 8 * 8 + 3 * 8 * 16 + 8 + 8 + 4 + 4  # q, k+v, o, MLP, two norms, q/k norms
    expected = (layer + 8 + 50 * 8) * 4  # the layer, the final norm, the head (the embedding only through it)
    assert bench_floor.decode_weight_bytes(model) == expected


def test_stream_bandwidth_is_a_positive_rate():
    assert bench_floor.stream_bandwidth(num_bytes=4 * 2**20, repeats=2) > 1e6  # more than 1 MB/s anywhere


def test_mixed_workload_is_seeded_and_within_its_ranges():
    a = bench_mixed.make_mixed_workload(40, (8, 256), (8, 128), 1000, seed=3)
    assert a == bench_mixed.make_mixed_workload(40, (8, 256), (8, 128), 1000, seed=3)
    assert a != bench_mixed.make_mixed_workload(40, (8, 256), (8, 128), 1000, seed=4)
    assert all(8 <= len(p) <= 256 and 8 <= m <= 128 and all(0 <= t < 1000 for t in p) for p, m in a)
    assert len({len(p) for p, _ in a}) > 10 and len({m for _, m in a}) > 10  # really drawn per request


def test_padded_work_counts_what_static_batches_compute():
    work = [([1] * 3, 5), ([1] * 7, 2), ([1] * 4, 9)]
    pad = bench_mixed.padded_work(work, batch_size=2)
    # batch 1: two rows padded to 7 prompt tokens and 5 output steps; batch 2: one row, no padding
    assert pad == dict(prompt_positions=2 * 7 + 4, output_positions=2 * 5 + 9,
                       useful_prompt_tokens=14, useful_output_tokens=16)


def test_bench_quick_run_prints_and_saves_the_floor_steps_and_mixed_workload(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--no-hf", "--concurrency", "1,2", "--requests", "2", "--mixed-requests", "3",
                       "--save", str(out), "--note", "a test run"]) == 0
    printed = capsys.readouterr().out
    for words in ("streaming read bandwidth", "bs-1 decode floor", "one decode step against its rows",
                  "mixed workload: 3 requests"):
        assert words in printed
    result = json.loads(out.read_text())
    assert result["note"] == "a test run"
    floor = result["floor"]
    assert floor["bandwidth_gb_per_s"] > 0 and floor["weight_bytes"] > 0
    assert floor["engine_decode_ms"] == pytest.approx(floor["forward_ms"] + floor["overhead_ms"])
    assert 0 < floor["percent_of_floor"] and floor["floor_ms"] == pytest.approx(
        floor["weight_bytes"] / (floor["bandwidth_gb_per_s"] * 1e9) * 1e3)
    assert [s["rows"] for s in result["step_times"]] == [1, 2] and all(s["ms"] > 0 for s in result["step_times"])
    assert result["mixed"]["workload"]["requests"] == 3 and result["mixed"]["engine_tokens_per_s"] > 0
    assert "hf_tokens_per_s" not in result["mixed"]  # --no-hf: the engine alone
    for rows, table in result["profiles"].items():  # a profile only where an aim was missed
        assert "aten::" in table and "Self CPU" in table
