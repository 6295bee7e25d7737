"""The benchmark's parts: one projection rule for every path, the memory floor, the mixed
workload."""

import json
import statistics

import pytest
import torch
import torch.nn.functional as F

from minillm.bench import floor as bench_floor
from minillm.bench import mixed as bench_mixed
from minillm.bench import throughput as bench
from minillm.model import ModelConfig, Transformer, linear, pack_for_cpu


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 9, 33])
def test_linear_equals_f_linear_for_any_row_count(rows):
    g = torch.Generator().manual_seed(rows)
    w, x = (
        torch.nn.Parameter(torch.randn(96, 40, generator=g)),
        torch.randn(rows, 40, generator=g),
    )
    with torch.no_grad():
        got, batched = linear(x, w), linear(x.view(1, rows, 40), w)
        assert got.shape == (rows, 96)
        assert torch.allclose(got, F.linear(x, w), rtol=1e-5, atol=1e-5)
        assert torch.equal(batched[0], got)  # batch dims are kept


def count_ops(fn) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages()}


ONEDNN_LINEAR = "mkldnn::_linear_pointwise"


@torch.no_grad()
def test_every_row_count_runs_onednn_on_the_packed_weight():
    """A CPU Parameter is packed once; 1, 4 and 16 rows all run oneDNN's linear on that copy."""
    w = torch.nn.Parameter(torch.randn(64, 32))
    assert "mkldnn::_reorder_linear_weight" in count_ops(lambda: linear(torch.randn(1, 32), w))
    for rows in (1, 4, 16):
        ops = count_ops(lambda rows=rows: linear(torch.randn(rows, 32), w))
        assert ops.get(ONEDNN_LINEAR) == 1, ops
        assert "aten::linear" not in ops and "aten::mm" not in ops, ops
        assert (
            "mkldnn::_reorder_linear_weight" not in ops
        )  # packed at the first call, not again
    plain = torch.randn(64, 32)  # not a Parameter: a one-off weight is not worth packing
    assert ONEDNN_LINEAR not in count_ops(lambda: linear(torch.randn(2, 32), plain))


def test_autograd_takes_f_linear():
    w, x = torch.nn.Parameter(torch.randn(8, 4)), torch.randn(3, 4)
    linear(x, w).sum().backward()  # oneDNN's packed call has no backward: the plain one runs
    assert torch.allclose(w.grad, x.sum(0).expand(8, 4))


@torch.no_grad()
@pytest.mark.parametrize("change", ["copy_", "load_state_dict", "data", "to"])
def test_a_weight_changed_after_packing_is_never_served_stale(change):
    model = Transformer(tiny_cfg(tied=True))
    assert model.pack_for_cpu() > 0
    x = torch.randn(3, 8)
    before = model.lm_head(x)
    new = torch.randn(50, 8)
    if change == "copy_":
        model.embed_tokens.weight.copy_(new)
    elif change == "load_state_dict":
        model.load_state_dict({**model.state_dict(), "embed_tokens.weight": new})
    elif change == "data":
        model.lm_head.weight.data = new  # the tied embedding is the same Parameter
    else:
        model.to(torch.float64).to(torch.float32)
        new = model.embed_tokens.weight.detach().clone()
    got = model.lm_head(x)
    assert torch.allclose(got, F.linear(x, new), rtol=1e-5, atol=1e-5)
    if change != "to":
        assert not torch.allclose(got, before)


@torch.no_grad()
def test_the_engine_runs_every_projection_packed():
    from minillm.engine import LLMEngine
    from minillm.sampling import SamplingParams

    cfg = tiny_cfg(tied=True)
    model = Transformer(cfg)
    engine = LLMEngine(
        model,
        max_num_seqs=2,
        max_num_batched_tokens=64,
        num_blocks=16,
        block_size=4,
        max_model_len=32,
        eos_token_id=None,
    )
    params = SamplingParams(max_tokens=3, ignore_eos=True)
    engine.generate([[1, 2, 3]], params, progress=False)  # warm: packs every weight once
    ops = count_ops(lambda: engine.generate([[1, 2, 3], [4, 5]], params, progress=False))
    steps = 3  # one prefill step for both, then 2 decode steps
    per_forward = 7 * cfg.num_hidden_layers + 1  # q, k, v, o, gate, up, down; the head
    assert ops.get(ONEDNN_LINEAR) == steps * per_forward, ops
    assert "aten::linear" not in ops and "aten::mm" not in ops
    assert "mkldnn::_reorder_linear_weight" not in ops  # packed once, before


def test_pack_for_cpu_counts_a_tied_weight_once():
    model = Transformer(tiny_cfg(tied=True))
    linears = sum(p.numel() for n, p in model.named_parameters() if n.endswith("proj.weight"))
    packed = pack_for_cpu(model)
    assert packed >= (linears + 50 * 8) * 4  # oneDNN pads small matrices up to its blocks
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # untie
    assert pack_for_cpu(model) == packed  # the same shapes: the tied head was counted once
    assert pack_for_cpu(model.to("meta")) == 0  # off the CPU: nothing packed


def tiny_cfg(tied: bool) -> ModelConfig:
    return ModelConfig(
        vocab_size=50,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
        tie_word_embeddings=tied,
    )


@pytest.mark.parametrize("tied", [True, False])
def test_decode_weight_bytes_counts_a_tied_head_once_and_skips_an_untied_embedding(tied):
    model = Transformer(tiny_cfg(tied))
    layer = (
        8 * 8 + 8 * 4 * 2 + 8 * 8 + 3 * 8 * 16 + 8 + 8 + 4 + 4
    )  # q, k+v, o, MLP, two norms, q/k norms
    expected = (
        layer + 8 + 50 * 8
    ) * 4  # the layer, the final norm, the head (the embedding only through it)
    assert bench_floor.decode_weight_bytes(model) == expected


def test_stream_bandwidth_is_a_positive_rate():
    assert (
        bench_floor.stream_bandwidth(num_bytes=4 * 2**20, repeats=2) > 1e6
    )  # more than 1 MB/s anywhere


def test_mixed_workload_is_seeded_and_within_its_ranges():
    a = bench_mixed.make_mixed_workload(40, (8, 256), (8, 128), 1000, seed=3)
    assert a == bench_mixed.make_mixed_workload(40, (8, 256), (8, 128), 1000, seed=3)
    assert a != bench_mixed.make_mixed_workload(40, (8, 256), (8, 128), 1000, seed=4)
    assert all(
        8 <= len(p) <= 256 and 8 <= m <= 128 and all(0 <= t < 1000 for t in p) for p, m in a
    )
    assert (
        len({len(p) for p, _ in a}) > 10 and len({m for _, m in a}) > 10
    )  # really drawn per request


def test_padded_work_counts_what_static_batches_compute():
    work = [([1] * 3, 5), ([1] * 7, 2), ([1] * 4, 9)]
    pad = bench_mixed.padded_work(work, batch_size=2)
    # batch 1: two rows padded to 7 prompt tokens and 5 output steps; batch 2: one row, no
    # padding
    assert pad == dict(
        prompt_positions=2 * 7 + 4,
        output_positions=2 * 5 + 9,
        useful_prompt_tokens=14,
        useful_output_tokens=16,
    )


def test_bench_quick_run_prints_and_saves_the_floor_steps_and_mixed_workload(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = bench.main(
        [
            "--quick",
            "--no-hf",
            "--concurrency",
            "1,2",
            "--requests",
            "2",
            "--mixed-requests",
            "3",
            "--save",
            str(out),
            "--note",
            "a test run",
        ]
    )
    printed = capsys.readouterr().out
    # a quick run on a busy machine may flag a timing artifact: then it says so and exits 1
    assert code == (1 if "ARTIFACT" in printed else 0), printed
    for words in (
        "streaming read bandwidth",
        "bs-1 decode floor",
        "one decode step against its rows",
        "what limits it: the step's",
        "one profiled 1-row forward per round",
        "mixed workload: 3 requests",
    ):
        assert words in printed
    result = json.loads(out.read_text())
    assert result["note"] == "a test run"
    # every ratio is saved round by round, paired with the baseline's round, median reported
    base_s = result["seconds"]["one at a time @1"]
    for r in result["rows"]:
        engine_s = result["seconds"][f"engine @{r['concurrency']}"]
        assert r["rounds"] == pytest.approx([b / e for b, e in zip(base_s, engine_s)])
        assert r["engine_vs_one_at_a_time"] == pytest.approx(statistics.median(r["rounds"]))
    assert result["single_request_latency_rounds"] == pytest.approx(
        [e / b for b, e in zip(base_s, result["seconds"]["engine @1"])]
    )
    for name, splits in result["breakdown_rounds"].items():  # a split of every round
        assert len(splits) == len(base_s)
        for b, s in zip(
            splits, result["seconds"][name if name != "one at a time" else "one at a time @1"]
        ):
            assert b["decode_s"] + b["prompt_s"] + b["other_s"] == pytest.approx(s)
    floor = result["floor"]
    assert floor["bandwidth_gb_per_s"] > 0 and floor["weight_bytes"] > 0
    assert floor["engine_decode_ms"] == pytest.approx(
        floor["forward_ms"] + floor["overhead_ms"]
    )
    assert 0 < floor["percent_of_floor"] and floor["floor_ms"] == pytest.approx(
        floor["weight_bytes"] / (floor["bandwidth_gb_per_s"] * 1e9) * 1e3
    )
    # every projection of the step is counted: q, k, v, o, gate, up, down per layer + the head
    assert floor["projection_calls"] == 7 * result["model"]["num_hidden_layers"] + 1
    assert floor["projections_ms"] > 0 and floor["projections_gb_per_s"] > 0
    # the profiled forward's wall time, beside the operators it lists
    assert floor["operators_ms"] >= floor["projections_ms"] and floor["profiled_wall_ms"] > 0
    steps_ = result["mixed"]["steps"]["engine"]  # the mixed run counts and times its forwards
    assert steps_["decode_forwards"] > 0 and steps_["prompt_forwards"] > 0
    assert 0 < steps_["forward_s"] <= steps_["wall_s"]
    assert [s["rows"] for s in result["step_times"]] == [1, 2] and all(
        s["ms"] > 0 for s in result["step_times"]
    )
    assert (
        result["mixed"]["workload"]["requests"] == 3
        and result["mixed"]["engine_tokens_per_s"] > 0
    )
    assert "hf_tokens_per_s" not in result["mixed"]  # --no-hf: the engine alone
    assert len(result["mixed"]["seconds"]["engine"]) == result["workload"]["repeats"]
    # the run's verdict and its saved list agree (the rule itself is checked below, in
    # test_a_ratio_above_c_or_above_its_ceiling_is_an_artifact; a quick run's timings are too
    # short to promise no artifact)
    assert bool(result["artifact_problems"]) == ("ARTIFACT" in printed)
    forms = result["forms"]  # the output layer, then an MLP projection
    assert [(f["rows"], f["threads"]) for f in forms] == [(1, 1), (2, 1)] * 2
    assert all(
        f[form]["ms"] > 0 for f in forms for form in ("F.linear", "weight @ x.T", "packed")
    )
    for _rows, table in result["profiles"].items():  # a profile only where an aim was missed
        assert "aten::" in table and "Self CPU" in table


def test_a_ratio_above_c_or_above_its_ceiling_is_an_artifact():
    steps = [dict(rows=1, ceiling=1.0), dict(rows=2, ceiling=1.9), dict(rows=4, ceiling=3.0)]

    def rows(r2, r4):
        return [
            dict(concurrency=2, engine_vs_one_at_a_time=r2),
            dict(concurrency=4, engine_vs_one_at_a_time=r4),
        ]

    assert bench.artifact_problems(rows(1.8, 2.9), steps) == []
    assert len(bench.artifact_problems(rows(2.65, 2.9), steps)) == 2  # above 2 and above 1.9
    (problem,) = bench.artifact_problems(
        rows(1.8, 3.6), steps
    )  # below 4, above the ceiling 3.0
    assert "ceiling" in problem and "3.00x" in problem


def test_a_target_is_judged_on_every_rounds_ratio():
    from minillm.bench.report import spread_verdict

    assert spread_verdict([1.83, 1.68, 1.28], 1.8) == "within noise"  # a median alone says MISS
    assert spread_verdict([1.9, 1.85, 2.0], 1.8) == "ok"
    assert spread_verdict([1.5, 1.6, 1.7], 1.8) == "MISS"
    assert spread_verdict([1.06, 1.18, 1.24], 1.05, at_most=True) == "MISS"
    assert spread_verdict([1.01, 1.02, 1.04], 1.05, at_most=True) == "ok"
    assert spread_verdict([1.01, 1.08], 1.05, at_most=True) == "within noise"


def test_the_mixed_aim_is_judged_on_every_round(capsys):
    from minillm.bench.report import print_mixed

    mixed = dict(
        workload=dict(requests=2, prompt_lens=[8, 16], max_tokens=[2, 4], concurrency=2),
        useful_output_tokens=6,
        engine_tokens_per_s=30.0,
        aim=3.0,
        hf_tokens_per_s=9.0,
        engine_vs_hf=3.2,  # the median clears the aim ...
        engine_vs_hf_rounds=[3.2, 2.9, 3.4],  # ... one round does not
        padding=dict(
            output_positions=8,
            useful_output_tokens=6,
            prompt_positions=32,
            useful_prompt_tokens=24,
        ),
    )
    print_mixed(mixed)
    assert "2.90x" in capsys.readouterr().out.split("engine / transformers")[1]
    print_mixed(mixed)
    assert capsys.readouterr().out.rstrip().endswith("within noise")
    print_mixed(dict(mixed, engine_vs_hf_rounds=[3.2, 3.1, 3.4]))
    assert capsys.readouterr().out.rstrip().endswith(") ok")


def test_forms_time_weights_that_exceed_the_cache():
    # A weight timed over and over stays in the last-level cache and reports more GB/s than
    # memory delivers: the forms cycle through copies that together exceed COLD_BYTES.
    from minillm.bench.forms import COLD_BYTES, cold_copies

    copies = cold_copies(96, 64, torch.Generator().manual_seed(0))
    assert len(copies) * copies[0].numel() * 4 >= COLD_BYTES
    assert len({c.data_ptr() for c in copies}) == len(copies)  # distinct memory, same values
    assert all(torch.equal(c, copies[0]) for c in copies)


def test_the_ceiling_comes_from_the_engines_own_forwards_in_the_timed_runs():
    # The ratio it bounds was measured in the engine's runs: so are its t(c) (pure-decode
    # forwards of c rows there), not a forward timed alone minutes apart.
    model = Transformer(tiny_cfg(tied=True))
    itls = {1: [0.011, 0.012], 2: [0.013, 0.013]}
    forwards = {1: [(1, 1, 0.010), (7, 1, 0.5)], 2: [(2, 2, 0.0125), (2, 2, 0.0125)]}
    floor, steps = bench_floor.measure_floor(model, [1, 2], itls, forwards, 8, 4, 75, 1)
    assert [s["ms"] for s in steps] == pytest.approx([10.0, 12.5])
    assert [s["timed"] for s in steps] == ["in the runs"] * 2
    assert [s["ceiling"] for s in steps] == pytest.approx([1.0, 2 * 10.0 / 12.5])
    assert steps[1]["overhead_ms"] == pytest.approx(13.0 - 12.5)


def test_the_breakdown_splits_wall_time_by_forward_kind():
    model = Transformer(tiny_cfg(tied=False))
    log = []
    stop = bench_floor.record_model_calls(model, log)
    from minillm.kv_cache import generate

    out = generate(model, [1, 2, 3, 4, 5], 4)
    stop()
    assert "forward" not in vars(model)  # the class's forward is back
    assert len(out) == 4 and [(n, r) for n, r, _ in log] == [(5, 1)] + [(1, 1)] * 3
    b = bench_floor.split_seconds(log, wall_s=10.0)
    assert b["prompt_s"] == log[0][2] and b["decode_s"] == sum(s for *_, s in log[1:])
    assert b["other_s"] == pytest.approx(10.0 - b["prompt_s"] - b["decode_s"])
    assert b["forwards"] == 4
    # an engine's step of 2 decodes is a decode; 2 decodes beside a prompt chunk is not
    split = bench_floor.split_seconds([(2, 2, 1.0), (9, 3, 2.0), (1, 1, 0.5)], wall_s=4.0)
    assert (split["decode_s"], split["prompt_s"], split["other_s"]) == (1.5, 2.0, 0.5)


def test_the_step_aims_follow_the_targets():
    # a step at its aim leaves the ceiling c * t(1) / t(c) exactly at the target there
    for c, aim in bench.STEP_AIMS.items():
        assert c / aim == pytest.approx(bench.TARGETS[c])


def test_step_summary_counts_decode_and_prompt_forwards_of_the_median_round():
    log = [(16, 8, 0.5), (8, 8, 0.1), (8, 8, 0.3), (40, 2, 1.0), (2, 2, 0.2), (8, 8, 0.1)]
    spans = [(0, 2), (2, 3), (3, 6)]  # three rounds' slices of the log
    seconds, mine = bench_mixed.median_round([5.0, 1.0, 3.0], log, spans)
    assert (seconds, mine) == (3.0, log[3:6])  # the round of 3.0 s, between 1.0 and 5.0
    st = bench_mixed.step_summary(mine, wall_s=seconds)
    assert (st["decode_forwards"], st["prompt_forwards"]) == (2, 1)
    assert st["decode_ms"] == pytest.approx(1e3 * 0.3 / 2)
    assert st["decode_rows"] == pytest.approx(5.0)
    assert st["prompt_ms"] == pytest.approx(1e3 * 1.0)
    assert (st["forward_s"], st["wall_s"]) == (pytest.approx(1.3), 3.0)


def test_record_hf_calls_logs_each_forward_and_restores_the_class_forward():
    from torch import nn

    class Toy(nn.Module):
        def forward(self, input_ids=None):
            return input_ids * 2

    toy, log = Toy(), []
    stop = bench_mixed.record_hf_calls(toy, log)
    toy(input_ids=torch.ones(3, 5))
    toy(torch.ones(3, 1))
    stop()
    toy(input_ids=torch.ones(1, 1))
    assert [(n, r) for n, r, _ in log] == [(15, 3), (3, 3)]
    assert "forward" not in vars(toy)


def test_bench_serve_saves_every_round_of_both_sides_in_the_order_run(
    tiny_default_path, tmp_path
):
    """bench-serve keeps every server round and every offline round (they alternate), each with
    its steps and mean step time, so the two sides can be compared round by round."""
    import argparse

    from minillm.bench import serve as bench_serve
    from minillm.cli.serve_args import add_bench_serve_args

    p = argparse.ArgumentParser()
    add_bench_serve_args(p)
    save = tmp_path / "serve.json"
    args = p.parse_args(
        ["--model", str(tiny_default_path), "--num-prompts", "4", "--random-input-len", "8"]
        + ["--random-output-len", "4", "--max-concurrency", "2", "--repeats", "3"]
        + ["--save", str(save)]
    )
    assert bench_serve.main(args) == 0
    saved = json.loads(save.read_text())
    (row,) = saved["runs"]
    rounds, offline = row["rounds"], saved["workload"]["offline_rounds"]
    assert len(rounds) == len(offline) == 3
    for side in rounds + offline:
        assert side["engine_steps"] >= 4 * 4 // 2  # 2 running per step, 4 tokens each
        assert side["engine_step_ms_mean"] > 0
    assert all(r["completed"] == 4 for r in rounds)
    by_throughput = sorted(r["output_throughput"] for r in rounds)
    assert row["output_throughput"] == by_throughput[1]  # the median round is the one reported
