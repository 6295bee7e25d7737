"""Chapter 9's measuring helpers: c(k) from every oracle row of the sweep, the live forwards'
paired per-round differences, their clocked parts, and the patched functions left as they
were."""

from __future__ import annotations

import pytest
import torch

import minillm.model
from minillm.bench.forward_split import clocked, paired, prepare, time_forms, varlen_only
from minillm.bench.spec_sweep import cost_ratios
from minillm.paged import PagedAttention


def oracle_row(b, alpha, k, verify_ms, decode_ms):
    return dict(
        batch_size=b,
        alpha=alpha,
        k=k,
        forward_ms={str(b * (k + 1)): verify_ms, "32": 20.0},
        plain_forward_ms={str(b): decode_ms, "32": 20.0},
    )


def test_cost_ratios_take_every_oracle_row_of_that_batch_and_k_and_no_draft_row():
    rows = [
        oracle_row(8, 1.0, 4, 24.0, 12.0),
        oracle_row(8, 0.0, 4, 30.0, 12.0),  # alpha 0 verifies are full too
        oracle_row(8, None, 4, 99.0, 1.0),  # the target as its own draft
        oracle_row(8, 1.0, 2, 18.0, 12.0),  # another k
        oracle_row(1, 1.0, 4, 11.0, 10.0),  # another batch size
    ]
    assert cost_ratios(rows, 8, 4) == [2.0, 2.5]
    assert cost_ratios(rows, 1, 4) == [pytest.approx(1.1)]


def test_paired_differences_are_taken_round_by_round():
    wall = {"verify": [10.0, 30.0, 12.0], "decode": [5.0, 25.0, 9.0]}
    # rounds differ by 5, 5, 3: the median 5, not the difference of the medians (12 - 9)
    assert paired(wall, "verify", "decode") == (5.0, 3.0, 5.0)


def test_varlen_only_sends_decodes_through_varlen_and_restores_decode(model):
    decode = PagedAttention.decode
    runner, batch = prepare(model, 2, 1, 1, context=5, bs=4)
    with torch.no_grad():
        plain = runner.forward(batch)
        with varlen_only():
            assert PagedAttention.decode is not decode
            forced = runner.forward(batch)
    assert PagedAttention.decode is decode
    torch.testing.assert_close(forced, plain, rtol=1e-4, atol=1e-4)


def test_clocked_times_every_projection_and_attention_call_and_restores_both(model):
    linear, attend = minillm.model.linear, PagedAttention.attend
    runner, batch = prepare(model, 2, 3, 3, context=5, bs=4)
    calls = []
    totals = {"projections": 0.0, "attention": 0.0}
    with torch.no_grad(), clocked(totals):
        timed_linear = minillm.model.linear
        minillm.model.linear = lambda x, w: calls.append(1) or timed_linear(x, w)
        runner.forward(batch)
        minillm.model.linear = timed_linear
    assert minillm.model.linear is linear and PagedAttention.attend is attend
    # q, k, v, o, gate, up, down per layer, then the output layer
    assert len(calls) == 7 * model.cfg.num_hidden_layers + 1
    assert totals["projections"] > 0 and totals["attention"] > 0


def test_time_forms_times_every_form_and_its_parts_each_round(model):
    forms = {"decode": (2, 1, 1, False), "verify": (2, 3, 3, False), "forced": (2, 1, 1, True)}
    wall, parts = time_forms(model, forms, context=5, rounds=2, warmup=1)
    for f in forms:
        assert len(wall[f]) == 2 and all(len(parts[f][p]) == 2 for p in parts[f])
        for rnd in range(2):  # the parts are inside the forward they were timed in
            inside = parts[f]["projections"][rnd] + parts[f]["attention"][rnd]
            assert 0 < inside < wall[f][rnd]
    assert PagedAttention.decode.__name__ == "decode"  # the forced form restored it
