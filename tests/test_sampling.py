"""Sampling: parameter checks, greedy, top-k / top-p filtering, and batch-invariant seeded
draws."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm import sampling
from minillm.sampling import SamplingParams, apply_top_k_top_p, check_logits, sample


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(max_tokens=0), "max_tokens is 0"),
        (dict(max_tokens=2.5), "max_tokens is 2.5"),
        (dict(temperature=-0.1), "temperature is -0.1"),
        (dict(temperature=math.nan), "temperature is nan"),
        (dict(top_k=-1), "top_k is -1"),
        (dict(top_p=0.0), "top_p is 0.0"),
        (dict(top_p=1.5), "top_p is 1.5"),
        (dict(stop_token_ids=[3, -2]), r"stop_token_ids\[1\] is -2: expected an int >= 0"),
        (dict(stop_token_ids=5), "stop_token_ids is 5: expected a list of ints"),
        (dict(stop_token_ids="5"), "stop_token_ids is '5': expected a list of ints"),
        (dict(stop_token_ids=[1.5]), r"stop_token_ids\[0\] is 1.5: expected an int"),
        (dict(seed=-5), "seed is -5"),
        (dict(seed=1.5), "seed is 1.5"),
        (dict(max_tokens=True), "max_tokens is True: expected an int >= 1"),
        (dict(temperature="0.7"), "temperature is '0.7': expected a finite number >= 0"),
        (dict(temperature=math.inf), "temperature is inf"),
        (dict(top_k=2.0), "top_k is 2.0: expected an int >= 0"),
        (dict(top_p=math.nan), "top_p is nan"),
        (dict(ignore_eos="no"), "ignore_eos is 'no': expected True or False"),
    ],
)
def test_bad_params_are_rejected_with_the_value(kwargs, words):
    with pytest.raises(ValueError, match=words):
        SamplingParams(**kwargs)


def test_stop_token_ids_become_a_tuple():
    assert SamplingParams(stop_token_ids=[5, 7]).stop_token_ids == (5, 7)


def test_numpy_and_tensor_numbers_become_plain_ones():
    import numpy as np

    sp = SamplingParams(
        max_tokens=np.int64(4),
        temperature=np.float32(0.5),
        top_k=torch.tensor(3),
        stop_token_ids=np.array([1, 2]),
        seed=np.uint8(7),
    )
    assert (sp.max_tokens, sp.temperature, sp.top_k, sp.stop_token_ids, sp.seed) == (
        4,
        0.5,
        3,
        (1, 2),
        7,
    )
    assert all(
        type(v) in (int, float)
        for v in (sp.max_tokens, sp.temperature, sp.top_k, sp.seed, *sp.stop_token_ids)
    )


@pytest.mark.parametrize("temperature", [1e-45, 1e-30, 1e-8, 9.9e-6, 1e-5, 1e-4, 1e-3])
def test_tiny_temperatures_pick_the_argmax_and_never_see_nan(temperature, monkeypatch):
    """Greedy in the limit: below 1e-5 (vLLM's threshold) the row is greedy; above, the scaled
    logits stay finite."""
    logits = torch.randn(6, 5000, generator=torch.Generator().manual_seed(3)) * 4
    seen = []
    real_softmax = torch.Tensor.softmax
    monkeypatch.setattr(
        torch.Tensor, "softmax", lambda t, *a, **k: seen.append(t) or real_softmax(t, *a, **k)
    )
    sp = SamplingParams(temperature=temperature, top_p=0.9, top_k=50)
    assert sp.greedy == (temperature < 1e-5)
    tokens = sample(logits, [sp] * 6, seeds=list(range(6)), steps=[0] * 6)
    assert tokens == logits.argmax(-1).tolist()
    assert all(not torch.isnan(t).any() for t in seen), "softmax saw NaN"


def test_the_old_division_would_have_produced_nan():
    """Why the max is subtracted first: logits / 1e-45 overflow to +-inf, and softmax of inf -
    inf is NaN."""
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    assert torch.isnan((logits / torch.tensor(1e-45)).softmax(-1)).any()


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_logits_are_an_error_not_a_token(bad):
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    logits[1, 4] = bad
    for sp in [SamplingParams(), SamplingParams(temperature=1.0)]:
        with pytest.raises(ValueError, match="logits row 1 holds NaN, \\+inf or only -inf"):
            sample(logits, [sp] * 3, seeds=[0] * 3, steps=[0] * 3)


def test_minus_inf_logits_are_allowed_but_not_a_whole_row():
    logits = torch.randn(2, 10, generator=torch.Generator().manual_seed(0))
    logits[0, :9] = -math.inf  # only token 9 possible
    assert (
        sample(logits, [SamplingParams(temperature=1.0)] * 2, seeds=[0, 1], steps=[0, 0])[0]
        == 9
    )
    logits[1] = -math.inf
    with pytest.raises(ValueError, match="logits row 1"):
        sample(logits, [SamplingParams()] * 2, seeds=[0, 1], steps=[0, 0])


def test_greedy_rows_take_the_argmax():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    tokens = sample(logits, [SamplingParams()] * 5, seeds=[0] * 5, steps=[0] * 5)
    assert tokens == logits.argmax(-1).tolist()


def test_top_k_keeps_exactly_the_k_best():
    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(1))
    out = apply_top_k_top_p(logits, top_k=[1, 5, 0], top_p=[1.0, 1.0, 1.0])
    for row, k in zip(range(3), [1, 5, 40]):
        kept = torch.isfinite(out[row]).nonzero().flatten()
        assert set(kept.tolist()) == set(logits[row].topk(k).indices.tolist())


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
    logits = probs.log()
    # 0.5 + 0.3 = 0.8 reaches 0.8, so the third-best token (0.15) is dropped; at 0.81 it stays.
    assert torch.isfinite(apply_top_k_top_p(logits, [0], [0.8])).tolist() == [
        [False, True, False, True]
    ]
    assert torch.isfinite(apply_top_k_top_p(logits, [0], [0.81])).tolist() == [
        [False, True, True, True]
    ]


def test_top_p_always_keeps_the_best_token():
    logits = torch.tensor([[0.0, 3.0, 1.0]])
    assert torch.isfinite(apply_top_k_top_p(logits, [0], [1e-6])).tolist() == [
        [False, True, False]
    ]


def test_top_k_keeps_ties_with_the_kth_value():
    logits = torch.tensor([[3.0, 1.0, 3.0, 2.0, 2.0]])
    assert torch.isfinite(apply_top_k_top_p(logits, [1], [1.0])).tolist() == [
        [True, False, True, False, False]
    ]
    assert torch.isfinite(apply_top_k_top_p(logits, [3], [1.0])).tolist() == [
        [True, False, True, True, True]
    ]


def test_top_p_runs_on_what_top_k_kept_renormalised():
    """vLLM's order: top-k, then top-p on the survivors' renormalised probabilities."""
    logits = torch.tensor([[0.05, 0.40, 0.25, 0.15, 0.10, 0.05]]).log()
    # top-2 leaves 0.40 and 0.25, renormalised 0.615 and 0.385: 0.615 alone reaches 0.6. (On the
    # full distribution 0.40 would not, and token 2 would stay.)
    assert torch.isfinite(apply_top_k_top_p(logits, [2], [0.6])).tolist() == [
        [False, True, False, False, False, False]
    ]
    assert torch.isfinite(apply_top_k_top_p(logits, [2], [0.7])).tolist() == [
        [False, True, True, False, False, False]
    ]


def test_top_p_of_one_keeps_every_token_of_a_large_vocabulary():
    """In float32 the running sum over 151,936 probabilities reaches 1.0 before the tail."""
    logits = torch.randn(2, 151_936, generator=torch.Generator().manual_seed(0)) * 3
    assert torch.isfinite(apply_top_k_top_p(logits, [0, 0], [1.0, 1.0])).all()


def _kept_values(row: torch.Tensor, k: int, p: float) -> list[float]:
    """The same rule, one row in plain Python: the logits that top-k, then top-p, keep."""
    values = sorted(row.tolist(), reverse=True)
    kth = values[k - 1] if 0 < k < len(values) else values[-1]
    survivors = [v for v in values if v >= kth]
    probs = torch.tensor(survivors, dtype=torch.float64).softmax(-1).tolist()
    kept, mass = [], 0.0
    for v, q in zip(survivors, probs):
        if mass >= p:
            break
        kept.append(v)
        mass += q
    return kept


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    k=st.sampled_from([0, 1, 3, 7, 40]),
    ps=st.lists(st.sampled_from([0.3, 0.55, 0.9, 1.0]), min_size=4, max_size=4),
)
def test_batched_filter_matches_the_row_by_row_rule(seed, k, ps):
    """Rounded logits tie often; which of two tied tokens top-p keeps is the sort's choice, so
    the kept values are compared, not the ids."""
    logits = (torch.randn(4, 40, generator=torch.Generator().manual_seed(seed)) * 2).round()
    out = apply_top_k_top_p(logits, [k] * 4, ps)
    for i in range(4):
        got = sorted(out[i][torch.isfinite(out[i])].tolist(), reverse=True)
        assert got == _kept_values(logits[i], k, ps[i])


def test_sampled_tokens_stay_inside_top_k():
    logits = torch.randn(1, 100, generator=torch.Generator().manual_seed(2))
    best2 = set(logits[0].topk(2).indices.tolist())
    sp = SamplingParams(
        temperature=5.0, top_k=2
    )  # a hot temperature would pick outsiders without the filter
    drawn = {sample(logits, [sp], [7], [step])[0] for step in range(200)}
    assert drawn == best2


def test_draws_follow_the_distribution():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    sp = SamplingParams(temperature=1.0)
    n = 4000
    counts = torch.zeros(4)
    for step in range(n):
        counts[sample(probs.log()[None], [sp], [11], [step])[0]] += 1
    assert (counts / n - probs).abs().max() < 0.03, counts / n


@settings(max_examples=25, deadline=None)
@given(n_rows=st.integers(1, 6), data=st.data())
def test_a_seeded_row_draws_the_same_token_in_any_batch(n_rows, data):
    """Row i's token depends on its logits, params, seed and step only: not on its neighbours or
    place."""
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 1000)))
    logits = torch.randn(n_rows, 64, generator=gen) * 2
    params = [
        SamplingParams(
            temperature=data.draw(st.sampled_from([0.0, 0.7, 1.0, 1.5])),
            top_k=data.draw(st.sampled_from([0, 5, 20])),
            top_p=data.draw(st.sampled_from([1.0, 0.9, 0.5])),
        )
        for _ in range(n_rows)
    ]
    seeds = data.draw(st.lists(st.integers(0, 2**40), min_size=n_rows, max_size=n_rows))
    steps = data.draw(st.lists(st.integers(0, 500), min_size=n_rows, max_size=n_rows))
    together = sample(logits, params, seeds, steps)
    alone = [
        sample(logits[i : i + 1], [params[i]], [seeds[i]], [steps[i]])[0] for i in range(n_rows)
    ]
    order = data.draw(st.permutations(range(n_rows)))
    shuffled = sample(
        logits[list(order)],
        [params[i] for i in order],
        [seeds[i] for i in order],
        [steps[i] for i in order],
    )
    assert together == alone
    assert [shuffled[order.index(i)] for i in range(n_rows)] == together


def test_different_steps_draw_different_tokens():
    logits = torch.zeros(1, 1000)  # uniform: repeats would mean the seed ignores the step
    sp = SamplingParams(temperature=1.0)
    drawn = [sample(logits, [sp], [3], [step])[0] for step in range(20)]
    assert len(set(drawn)) >= 15


@pytest.mark.parametrize("min_p", [0.0, 0.05])
def test_rows_without_top_k_or_top_p_skip_the_filter_and_draw_the_same_tokens(
    min_p, monkeypatch
):
    """k = 0, p = 1 keep every token, so skipping the sort must not change a single draw."""
    logits = torch.randn(6, 151_936, generator=torch.Generator().manual_seed(5)) * 3
    params = [
        SamplingParams(temperature=t, min_p=min_p) for t in (0.7, 1.0, 0.3, 1.5, 0.7, 2.0)
    ]
    params[2] = SamplingParams(temperature=0.7, top_k=20)  # one row that does filter
    seeds, steps = list(range(6)), [3, 0, 9, 1, 4, 2]
    seen = []
    real = sampling.apply_top_k_top_p
    monkeypatch.setattr(
        sampling, "apply_top_k_top_p", lambda x, k, p: seen.append(len(x)) or real(x, k, p)
    )
    fast = sample(logits, params, seeds, steps)
    assert seen == [1], "only the top_k row goes through the filter"
    monkeypatch.setattr(sampling, "uses_top_k_top_p", lambda sp: True)  # every row filtered
    assert sample(logits, params, seeds, steps) == fast
    assert seen == [1, 6]


def test_row_max_propagates_nan_wherever_it_sits():
    """check_logits relies on amax returning NaN for a row holding one, at any position and
    beside +inf or -inf; if amax skipped NaN, the NaN rows would pass."""
    for pos in (0, 5, 9):
        for fill in (0.0, math.inf, -math.inf):
            row = torch.full((1, 10), fill)
            row[0, :3] = torch.tensor([1.0, 2.0, 3.0])
            row[0, pos] = math.nan
            assert not torch.isfinite(row.amax(-1)).all()


@pytest.mark.parametrize("where", [0, 4, 9])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_check_logits_finds_the_bad_row_beside_masked_rows(bad, where):
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    logits[0, :7] = -math.inf  # a masked row: fine
    logits[2, where] = bad
    with pytest.raises(ValueError, match="logits row 2 holds NaN, \\+inf or only -inf"):
        check_logits(logits)
    logits[2, where] = 0.0
    check_logits(logits)  # masked and finite rows pass
    logits[1] = -math.inf
    with pytest.raises(ValueError, match="logits row 1"):
        check_logits(logits)
