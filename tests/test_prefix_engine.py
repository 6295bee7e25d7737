"""The engine with prefix caching: the same greedy tokens as without it and as transformers,
hits that match the
computed-token savings exactly, the last-token rule, preemption, aborts, salts, and a pool
that ends clean."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.checks.reference import hf_generate
from minillm.engine import LLMEngine
from minillm.kv_cache import generate
from minillm.model import Transformer
from minillm.runner import build_batch
from minillm.sampling import SamplingParams

VOCAB = 512


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def path(tiny_checkpoint):
    return tiny_checkpoint(seed=5, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def model(path):
    return Transformer.from_pretrained(path)


@pytest.fixture(scope="module")
def reference(model, path):
    """Greedy tokens one request at a time: chapter 2's generate, checked once against
    transformers' generate."""
    memo = {}

    def ref(prompt, max_tokens, hf=False):
        key = (tuple(prompt), max_tokens)
        if key not in memo:
            memo[key] = [generate(model, prompt, max_tokens), None]
        if hf and memo[key][1] is None:
            memo[key][1] = hf_generate(path, prompt, max_tokens)
            assert memo[key][1] == memo[key][0], (
                "transformers' generate disagrees with one-at-a-time generation"
            )
        return memo[key][0]

    return ref


def shared_prefix_work(seed, n_min=4, n_max=14):
    """Prompts from a few shared heads (system prompts, few-shot headers) plus tails, some
    extending earlier ones."""
    rng = random.Random(seed)
    heads = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 30))] for _ in range(3)]
    work = []
    for _ in range(rng.randint(n_min, n_max)):
        prompt = rng.choice(heads) + [rng.randrange(VOCAB) for _ in range(rng.randint(0, 10))]
        if work and rng.random() < 0.3:
            prompt = (
                work[rng.randrange(len(work))][0] + prompt[-4:]
            )  # a next turn: an earlier prompt plus more
        work.append((prompt, rng.randint(1, 8)))
    return work


def check_clean(engine):
    pool, kv = engine.scheduler.pool, engine.scheduler.kv
    assert sorted(pool.free_blocks) == list(range(pool.num_blocks)), (
        "a block leaked or sits twice in the free queue"
    )
    assert pool.ref_counts == [0] * pool.num_blocks and not kv.chains


def admissions(plans):
    """From the plans alone: (request, num_computed of its first chunk) for every admission,
    preemptions included."""
    running, found = set(), []
    for plan in plans:
        running -= set(plan.preempted)
        for c in plan.chunks:
            if c.request_id not in running:
                found.append((c.request_id, c.num_computed))
                running.add(c.request_id)
    return found


def serve(model, work, aborts, enable, **kw):
    """Run work (arrival order), aborting request i right before step aborts[i]; returns tokens
    per request."""
    engine = LLMEngine(model, enable_prefix_caching=enable, record_plans=True, **kw)
    ids = [engine.add_request(p, SamplingParams(max_tokens=m)) for p, m in work]
    tokens, outputs, step = {i: [] for i in ids}, {}, 0
    while engine.has_unfinished():
        for i, rid in enumerate(ids):
            if aborts.get(i) == step and rid not in outputs:
                engine.abort_request(rid)
                outputs[rid] = None
        for ev in engine.step():
            tokens[ev.request_id].append(ev.token_id)
            if ev.output is not None:
                outputs[ev.request_id] = ev.output
        step += 1
    check_clean(engine)
    return engine, [tokens[i] for i in ids], [outputs[i] for i in ids]


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    block_size=st.sampled_from([1, 2, 4, 8]),
    num_blocks=st.integers(6, 40),
    budget=st.integers(2, 48),
    max_seqs=st.integers(1, 8),
    num_aborts=st.integers(0, 3),
)
def test_greedy_tokens_with_caching_equal_without_and_transformers(
    model, reference, seed, block_size, num_blocks, budget, max_seqs, num_aborts
):
    work = shared_prefix_work(seed)
    need = max(-(-(len(p) + m - 1) // block_size) for p, m in work)
    rng = random.Random(seed)
    aborts = {rng.randrange(len(work)): rng.randrange(12) for _ in range(num_aborts)}
    kw = dict(
        block_size=block_size,
        num_blocks=max(num_blocks, need),
        max_num_batched_tokens=budget,
        max_num_seqs=max_seqs,
    )
    _, off, _ = serve(model, work, aborts, False, **kw)
    engine, on, outs = serve(model, work, aborts, True, **kw)
    for i, (prompt, max_tokens) in enumerate(work):
        want = reference(
            prompt, max_tokens, hf=i < 2
        )  # transformers for a few per example: it is slow
        if i in aborts:
            assert on[i] == want[: len(on[i])] and off[i] == want[: len(off[i])], (
                f"aborted request {i} went wrong first"
            )
        else:
            assert on[i] == off[i] == want, f"request {i} differs"
    found = admissions(engine.plans)
    assert engine.stats.num_hit_tokens == sum(hit for _, hit in found), (
        "reported hits differ from the plans' start points"
    )
    assert engine.stats.num_computed_tokens == sum(p.num_tokens for p in engine.plans)
    firsts = {}
    for rid, hit in found:
        firsts.setdefault(rid, hit)
    assert all(o.num_cached_tokens == firsts[o.request_id] for o in outs if o is not None)


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    block_size=st.sampled_from([1, 2, 4, 16]),
    budget=st.integers(8, 64),
    max_seqs=st.integers(1, 8),
)
def test_computed_tokens_drop_by_exactly_the_reported_hits(
    model, seed, block_size, budget, max_seqs
):
    """With room for everything (no preemption), caching changes the tokens computed by exactly
    the hits."""
    work = shared_prefix_work(seed)
    kw = dict(
        block_size=block_size,
        num_blocks=sum(len(p) + m for p, m in work) + 8,
        max_num_batched_tokens=budget,
        max_num_seqs=max_seqs,
    )
    off, _, _ = serve(model, work, {}, False, **kw)
    on, _, outs = serve(model, work, {}, True, **kw)
    assert off.stats.num_hit_tokens == 0
    assert (
        off.stats.num_computed_tokens - on.stats.num_computed_tokens == on.stats.num_hit_tokens
    )
    assert on.stats.num_hit_tokens == sum(o.num_cached_tokens for o in outs)
    assert (
        off.stats.num_query_tokens == on.stats.num_query_tokens == sum(len(p) for p, _ in work)
    )


def test_a_full_hit_on_a_block_boundary_recomputes_the_last_block(model, reference):
    prompt = list(range(10, 18))  # exactly 2 blocks of 4
    engine = LLMEngine(model, block_size=4, enable_prefix_caching=True, record_plans=True)
    first = engine.generate([prompt], SamplingParams(max_tokens=3))[0]
    again = engine.generate([prompt], SamplingParams(max_tokens=3))[0]
    chunk = engine.plans[-3].chunks[0]
    assert (first.num_cached_tokens, again.num_cached_tokens) == (0, 4)
    assert (chunk.num_computed, chunk.num_new, chunk.need_logits) == (4, 4, True)
    assert first.token_ids == again.token_ids == reference(prompt, 3)


def test_a_preempted_request_hits_its_own_blocks_again(model, reference):
    rng = random.Random(2)
    prompts = [[rng.randrange(VOCAB) for _ in range(n)] for n in (12, 10, 11, 9)]
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=14,
        max_num_batched_tokens=64,
        max_num_seqs=4,
        record_plans=True,
        enable_prefix_caching=True,
    )
    outs = engine.generate(prompts, SamplingParams(max_tokens=14))
    recomputes = [c for p in engine.plans for c in p.chunks if c.kind == "recompute"]
    assert sum(o.num_preemptions for o in outs) > 0 and recomputes
    assert any(c.num_computed > 0 for c in recomputes), (
        "a readmitted request should find its own freed blocks"
    )
    assert [o.token_ids for o in outs] == [reference(p, 14) for p in prompts]
    check_clean(engine)


def test_chunked_prefill_starts_at_the_cached_length(model, reference):
    system = list(range(100, 140))  # 40 tokens: 10 blocks of 4
    engine = LLMEngine(
        model,
        block_size=4,
        max_num_batched_tokens=8,
        enable_prefix_caching=True,
        record_plans=True,
    )
    engine.generate([system + [1, 2]], SamplingParams(max_tokens=2))
    start = len(engine.plans)
    out = engine.generate(
        [system + [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]], SamplingParams(max_tokens=2)
    )[0]
    chunks = [(c.num_computed, c.num_new) for p in engine.plans[start:] for c in p.chunks]
    assert out.num_cached_tokens == 40 and chunks == [(40, 8), (48, 3), (51, 1)]
    assert out.token_ids == reference(system + [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], 2)


def test_logits_after_a_cached_prefix_equal_a_full_forward(model):
    """The runner on request B's suffix, its first blocks found in the cache after request A, vs
    B's full forward."""
    rng = random.Random(7)
    shared = [rng.randrange(VOCAB) for _ in range(24)]
    a, b = shared + [1, 2, 3], shared + [rng.randrange(VOCAB) for _ in range(9)]
    engine = LLMEngine(model, block_size=8, enable_prefix_caching=True)
    engine.generate([a], SamplingParams(max_tokens=1))
    seq = engine.make_sequence(b)
    blocks, hit = engine.scheduler.kv.get_computed_blocks(seq)
    assert hit == 24 and engine.scheduler.kv.allocate_slots(seq, len(b), blocks)
    logits = engine.runner.forward(build_batch([(b[hit:], hit, seq.block_table, True)], 8))[0]
    with torch.no_grad():
        full = model(torch.tensor([b]))[0, -1]
    # the book's fp32 parity bound (tests/test_runner.py's TOL): the suffix and the full forward
    # add the same products in other orders (1 row of the output layer against 33), float
    # rounding only
    assert (logits - full).abs().max().item() < 1e-4


def test_only_requests_with_the_same_cache_salt_share_blocks(model):
    prompt = list(range(20, 40))
    engine = LLMEngine(model, block_size=4, enable_prefix_caching=True)
    outs = [
        engine.generate([p], SamplingParams(max_tokens=2))[0]
        for p in (
            {"prompt_token_ids": prompt, "cache_salt": "alice"},
            {"prompt_token_ids": prompt, "cache_salt": "bob"},
            {"prompt_token_ids": prompt},
            {"prompt_token_ids": prompt, "cache_salt": "alice"},
        )
    ]
    assert [o.num_cached_tokens for o in outs] == [0, 0, 0, 16]
    assert len({tuple(o.token_ids) for o in outs}) == 1


@pytest.mark.parametrize(
    "prompt, words",
    [
        ({"prompt_token_ids": [1, 2], "cache_salt": ""}, "cache_salt is ''"),
        ({"prompt_token_ids": [1, 2], "cache_salt": 7}, "cache_salt is 7"),
        (
            {"prompt_token_ids": [1, 2], "salt": "x"},
            "expected a dict with one of 'prompt' .text. or 'prompt_token_ids'",
        ),
        ({"prompt": "a", "prompt_token_ids": [1]}, "expected a dict with one of 'prompt'"),
    ],
)
def test_bad_prompt_dicts_are_rejected(model, prompt, words):
    engine = LLMEngine(model, enable_prefix_caching=True)
    with pytest.raises(ValueError, match=words):
        engine.add_request(prompt)
    assert not engine.has_unfinished()


def test_enable_prefix_caching_must_be_a_bool(model):
    with pytest.raises(ValueError, match="enable_prefix_caching is 'yes'"):
        LLMEngine(model, enable_prefix_caching="yes")


def test_reset_prefix_cache_forgets_shared_prefixes(model):
    engine = LLMEngine(model, block_size=4, enable_prefix_caching=True)
    engine.generate([list(range(30))], SamplingParams(max_tokens=2))
    assert engine.reset_prefix_cache()
    assert (
        engine.generate([list(range(30))], SamplingParams(max_tokens=2))[0].num_cached_tokens
        == 0
    )
    assert engine.stats.hit_rate == 0.0


def test_each_plan_reports_its_own_hits(model):
    engine = LLMEngine(model, block_size=4, enable_prefix_caching=True, record_plans=True)
    engine.generate([list(range(40))], SamplingParams(max_tokens=1))
    engine.generate([list(range(40)) + [7]], SamplingParams(max_tokens=1))
    last = engine.plans[-1].cache
    assert (
        last.num_queries,
        last.num_query_tokens,
        last.num_hit_tokens,
        last.num_computed_tokens,
    ) == (1, 41, 40, 1)
    assert engine.stats.num_hit_tokens == 40 and engine.stats.hit_rate == 40 / 81


def test_shared_prefix_bench_quick_run_saves_a_table(tmp_path, capsys):
    import json

    from minillm.bench.throughput import main

    out = tmp_path / "prefix.json"
    assert (
        main(["--workload", "shared-prefix", "--quick", "--threads", "1", "--save", str(out)])
        == 0
    )
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert result["identical_tokens"] and set(rows) == {
        f"{k}, caching {s}" for k in ("queued", "alone") for s in ("on", "off")
    }
    for kind in ("queued", "alone"):
        off, on = rows[f"{kind}, caching off"], rows[f"{kind}, caching on"]
        assert off["hit_tokens"] == 0 and on["hit_tokens"] > 0
        assert off["prompt_tokens_computed"] - on["prompt_tokens_computed"] == on["hit_tokens"]
    assert "fewer prompt tokens" in capsys.readouterr().out
    for row in rows.values():  # the mean TTFT splits into the wait and the rest
        assert row["wait_mean"] + row["admitted_to_first_token_mean"] == pytest.approx(
            row["ttft_mean"]
        )
        rounds = row["rounds"]  # one value per timed round, for the spread
        assert all(len(v) == result["workload"]["repeats"] for v in rounds.values())
        assert min(rounds["seconds"]) <= row["seconds"] <= max(rounds["seconds"])


def test_shared_prefix_bench_times_the_wait_before_admission(model):
    """With one request running at a time, the second waits at least until the first has its
    first token; the first is admitted at once."""
    from minillm.bench.prefix import serve

    engine = LLMEngine(model, max_num_seqs=1, eos_token_id=None)
    params = SamplingParams(max_tokens=3, ignore_eos=True)
    outs, waits = serve(engine, [[1, 2, 3, 4, 5], [6, 7, 8]], params)
    assert [len(o.token_ids) for o in outs] == [3, 3]
    assert waits[0] < outs[0].ttft < waits[1] < outs[1].ttft


@pytest.mark.parametrize(
    "args, words",
    [
        (["--requests", "0"], "--requests"),
        (["--user-lens", "9,3"], "--user-lens"),
        (["--save", "/"], "--save"),
    ],
)
def test_shared_prefix_bench_checks_its_options_first(args, words, capsys):
    from minillm.bench.throughput import main

    with pytest.raises(SystemExit):
        main(["--workload", "shared-prefix", "--quick", *args])
    assert words in capsys.readouterr().err


def test_shared_prefix_bench_judges_the_target_only_on_the_workload_it_is_for(capsys):
    """The >= 80% drop is promised for a 256-token system prompt; --quick's 64-token one cannot
    reach it and
    must not print MISS, while the full workload still gets its verdict either way."""
    from minillm.bench.prefix import print_table

    def rows(on_computed):
        row = dict(seconds=1.0, ttft_mean=1.0, ttft_p50=1.0, ttft_p90=1.0, hit_rate=0.0)
        return {
            f"{k}, caching {s}": dict(
                row, prompt_tokens_computed=100 if s == "off" else on_computed
            )
            for k in ("queued", "alone")
            for s in ("off", "on")
        }

    assert print_table(
        rows(50), 8, True, system_len=64
    )  # a 50% drop on the quick workload is no failure
    out = capsys.readouterr().out
    assert (
        "MISS" not in out and "target is for a 256-token system prompt; this one has 64" in out
    )
    assert not print_table(rows(50), 8, True, system_len=256)
    assert "(target >= 80%) MISS" in capsys.readouterr().out
    assert print_table(rows(10), 8, True, system_len=256)
    assert "(target >= 80%) ok" in capsys.readouterr().out
    assert not print_table(
        rows(10), 8, False, system_len=64
    )  # different tokens fail on any workload
