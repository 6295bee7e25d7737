"""Chapter 9's oracle proposer and the expected-tokens formula it measures: the formula against
a term-by-term sum, the oracle's output left exact, its acceptance at alpha 0 and 1, and the
break-even alpha."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from minillm.bench.spec_sweep import break_even_alpha
from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams
from minillm.spec_decode.oracle import (
    OracleProposer,
    TimedOracleProposer,
    expected_tokens,
    expected_tokens_cut,
    wrong,
)


@pytest.mark.parametrize("alpha, k", [(0.0, 3), (0.5, 2), (0.8, 4), (0.95, 8), (1.0, 4)])
def test_expected_tokens_is_the_sum_of_alpha_powers(alpha, k):
    assert expected_tokens(alpha, k) == pytest.approx(sum(alpha**j for j in range(k + 1)))


@pytest.mark.parametrize("alpha, k, match", [(1.1, 2, "alpha is 1.1"), (0.5, -1, "k is -1")])
def test_expected_tokens_refuses_bad_arguments_by_name(alpha, k, match):
    with pytest.raises(ValueError, match=match):
        expected_tokens(alpha, k)


def test_the_cut_expectation_counts_the_last_short_verifies():
    # alpha = 1: 47 tokens are nine verifies of 5 and one of 2 (the last token left is decoded)
    assert expected_tokens_cut(1.0, 4, 47) == pytest.approx(47 / 10)
    assert expected_tokens_cut(1.0, 4, 63) == pytest.approx(63 / 13)
    assert expected_tokens_cut(0.5, 2, 2) == pytest.approx(1.5)  # one verify of 1 proposal
    # long requests: the cut fades and E remains
    assert expected_tokens_cut(0.8, 4, 20_000) == pytest.approx(expected_tokens(0.8, 4), 1e-3)
    assert all(expected_tokens_cut(a, 4, 47) < expected_tokens(a, 4) for a in (0.5, 0.8, 0.9))


def test_the_cut_expectation_follows_a_simulation():
    rng = random.Random(0)
    alpha, k, n, verifies, tokens = 0.8, 4, 30, 0, 0
    for _ in range(20_000):
        left = n
        while left > 0:
            cap = min(k, left - 1)
            if cap == 0:
                left -= 1
                continue
            j = 0
            while j < cap and rng.random() < alpha:
                j += 1
            verifies, tokens, left = verifies + 1, tokens + j + 1, left - j - 1
    assert tokens / verifies == pytest.approx(expected_tokens_cut(alpha, k, n), abs=0.02)


def test_the_cut_expectation_refuses_a_request_with_no_verify():
    with pytest.raises(ValueError, match="n is 1"):
        expected_tokens_cut(0.5, 4, 1)
    with pytest.raises(ValueError, match="n is 0"):
        expected_tokens_cut(0.5, 4, 0)


def test_a_wrong_token_is_never_the_right_one():
    assert all(wrong(t) != t and wrong(t) >= 0 for t in (0, 1, 5, 151_935))


def oracle_run(model, alpha: float, k: int, prompts, truth, seed: int = 0):
    engine = LLMEngine(
        model,
        eos_token_id=[],
        speculative_config={"method": "ngram", "num_speculative_tokens": k},
    )
    continuations = {tuple(p): t for p, t in zip(prompts, truth)}
    engine.spec.proposer = OracleProposer(continuations, alpha, seed=seed)
    outs = engine.generate(prompts, SamplingParams(max_tokens=len(truth[0]), ignore_eos=True))
    return [o.token_ids for o in outs], engine.spec_stats


@pytest.fixture(scope="module")
def workload(model):
    rng = random.Random(3)
    prompts = [[rng.randrange(model.cfg.vocab_size) for _ in range(6)] for _ in range(4)]
    params = SamplingParams(max_tokens=25, ignore_eos=True)
    truth = [o.token_ids for o in LLMEngine(model, eos_token_id=[]).generate(prompts, params)]
    return prompts, truth


def test_the_oracle_at_alpha_one_is_always_accepted(model, workload):
    tokens, stats = oracle_run(model, 1.0, 4, *workload)
    assert tokens == workload[1]
    # 25 tokens: one from the prefill, then 4 full verifies of 5 and one of the last 4
    assert stats.num_drafts == 4 * 5 and stats.acceptance_rate == 1.0


def test_the_oracle_at_alpha_zero_is_never_accepted(model, workload):
    tokens, stats = oracle_run(model, 0.0, 3, *workload)
    assert tokens == workload[1]
    assert stats.num_drafts > 0 and stats.num_accepted_tokens == 0


def test_tokens_per_verify_follow_the_formula(model, workload):
    tokens, stats = oracle_run(model, 0.7, 2, *workload, seed=5)
    assert tokens == workload[1]
    assert abs(stats.mean_accepted_length - expected_tokens(0.7, 2)) < 0.4


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_the_timed_oracle_draft_runs_the_draft_and_proposes_the_oracle(model, workload, alpha):
    prompts, truth = workload
    engine = LLMEngine(
        model,
        eos_token_id=[],
        speculative_config={
            "method": "draft_model",
            "num_speculative_tokens": 3,
            "num_draft_layers": 1,
        },
    )
    continuations = {tuple(p): t for p, t in zip(prompts, truth)}
    timed = TimedOracleProposer(engine.spec.proposer, OracleProposer(continuations, alpha, 7))
    engine.spec.proposer = timed
    calls = [0]
    draft_forward = timed.runner.forward

    def counting(batch):
        calls[0] += 1
        return draft_forward(batch)

    timed.runner.forward = counting
    rounds = []  # per propose call: its longest proposal, one draft forward per token
    draft_propose = timed.draft.propose

    def logged(seqs, ks):
        rounds.append(max(ks, default=0))
        return draft_propose(seqs, ks)

    timed.draft.propose = logged
    outs = engine.generate(prompts, SamplingParams(max_tokens=len(truth[0]), ignore_eos=True))
    assert [o.token_ids for o in outs] == truth
    # the oracle's counts, draw for draw: the draft's own tokens were never proposed
    _, free = oracle_run(model, alpha, 3, prompts, truth, seed=7)
    got = engine.spec_stats
    assert (got.num_drafts, got.num_accepted_tokens) == (
        free.num_drafts,
        free.num_accepted_tokens,
    )
    assert calls[0] == sum(rounds) > 0  # the draft ran every round a real draft would
    assert all(s.request_id not in timed.draft.computed for s in engine.scheduler.running)


def test_the_oracle_refuses_a_prompt_it_was_not_given(model, workload):
    prompts, truth = workload
    engine = LLMEngine(
        model,
        eos_token_id=[],
        speculative_config={"method": "ngram", "num_speculative_tokens": 2},
    )
    engine.spec.proposer = OracleProposer({tuple(prompts[0]): truth[0]}, 0.5)
    with pytest.raises(KeyError, match="no greedy continuation"):
        engine.generate([prompts[1]], SamplingParams(max_tokens=5, ignore_eos=True))


def test_break_even_alpha_solves_expected_tokens_equals_cost():
    a = break_even_alpha(4, 2.0)
    assert expected_tokens(a, 4) == pytest.approx(2.0, abs=1e-9)
    assert break_even_alpha(2, 1.0) == pytest.approx(0.0, abs=1e-9)  # a free verify pays always
    assert break_even_alpha(2, 3.5) is None  # 3 tokens at most cannot pay for 3.5 decodes


def test_the_sweep_saves_the_formula_and_each_runs_forwards(model, capsys):
    from minillm.bench.spec_sweep import print_rows, sweep

    rows = sweep(model, alphas=(1.0,), ks=(2,), batch_sizes=(1,), max_tokens=6)
    (r,) = rows
    # 5 tokens after the prefill's: verifies of 3 and 2 tokens, the cut the formula takes in
    assert r["tokens_per_verify"] == pytest.approx(r["expected_tokens_cut"]) == 2.5
    assert r["expected_tokens"] == 3.0
    assert r["forwards"]["verify"]["count"] == 2 and r["plain_forwards"]["verify"]["count"] == 0
    assert r["plain_forwards"]["decode"]["count"] == 5
    print_rows(rows)
    out = capsys.readouterr().out
    assert " 0.83 |" in out  # tokens/E: 2.5 / 3
    assert "batch 1: the 1 paired plain runs took" in out


def test_the_sweep_keeps_every_pairs_speedup_and_one_cost(model):
    from minillm.bench.spec_sweep import sweep

    (r,) = sweep(model, alphas=(1.0,), ks=(2,), batch_sizes=(1,), max_tokens=6, repeats=3)
    assert len(r["speedups"]) == len(r["forward_speedups"]) == len(r["all_plain_seconds"]) == 3
    assert r["speedup"] == sorted(r["speedups"])[1]  # the median pair's
    assert r["plain_seconds"] / r["seconds"] == pytest.approx(r["speedup"])
    assert r["cost_ratio"] > 0 and r["tokens_per_verify"] == 2.5  # the same counts every pair


def test_the_sweep_splits_the_forwards_that_price_c(model):
    from minillm.bench.spec_sweep import cost_parts, cost_ratios, sweep

    rows = sweep(model, alphas=(0.0, 1.0), ks=(2,), batch_sizes=(2,), max_tokens=6)
    parts = cost_parts(rows, 2, 2)
    assert len(parts) == 2
    # the verify and decode forwards of cost_ratios, each with its clocked parts inside it
    assert [v / d for v, _, _, d, _, _ in parts] == cost_ratios(rows, 2, 2)
    for v, vp, va, d, dp, da in parts:
        assert 0 < vp + va < v and 0 < dp + da < d


def test_the_timed_oracle_refuses_a_draft_that_proposes_another_count():
    class Fixed:  # proposes n tokens for every request
        runner = None

        def __init__(self, n):
            self.n = n

        def propose(self, seqs, ks):
            return [([1] * self.n, None) for _ in seqs]

        def forget(self, request_id):
            pass

    timed = TimedOracleProposer(Fixed(2), Fixed(3))
    with pytest.raises(RuntimeError, match="r0: the draft proposed 2 tokens and the oracle 3"):
        timed.propose([SimpleNamespace(request_id="r0")], [3])
