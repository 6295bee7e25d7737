"""Chapter 9's measuring helpers: c(k) from every oracle row of the sweep, the live forwards'
paired per-round differences, their clocked parts, and the patched functions left as they
were."""

from __future__ import annotations

import pytest
import torch

import minillm.model
from minillm.bench.forward_split import clocked
from minillm.bench.spec_sweep import cost_ratios
from minillm.paged import PagedAttention, PagedKVCache
from minillm.runner import ModelRunner, build_batch


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


def prepare(model, requests: int, query_tokens: int, num_logits: int, context: int, bs=16):
    """A runner whose requests each hold `context` positions, and the batch that adds
    `query_tokens` to each, with logits at the last `num_logits` of them."""
    per = -(-(context + query_tokens) // bs)  # blocks per request
    runner = ModelRunner(model, PagedKVCache.for_model(model, requests * per, bs))
    tables = [list(range(r * per, (r + 1) * per)) for r in range(requests)]
    items = [([2] * query_tokens, context, t, num_logits) for t in tables]
    return runner, build_batch(items, bs)


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
