"""Speculative decoding in the engine: greedy tokens identical to plain decoding and to
transformers,
with n-gram and draft-model proposers, several k, mixed with plain and sampled requests,
under forced preemption, aborts and prefix caching; stop tokens and max_tokens inside an
accepted run; the metrics; the configuration's errors; and a pool that ends clean."""

import random

import pytest
import torch

from minillm.checks.reference import hf_generate
from minillm.engine import LLMEngine
from minillm.kv_cache import generate
from minillm.model import Transformer
from minillm.runner import build_batch
from minillm.sampling import SamplingParams
from minillm.spec_decode.speculator import ngram_propose, truncated_draft

VOCAB = 512


@pytest.fixture(scope="module")
def path(tiny_checkpoint):
    return tiny_checkpoint(seed=9, vocab_size=VOCAB, num_hidden_layers=4)


@pytest.fixture(scope="module")
def model(path):
    return Transformer.from_pretrained(path)


@pytest.fixture(scope="module")
def reference(model):
    memo = {}

    def ref(prompt, max_tokens):
        key = (tuple(prompt), max_tokens)
        if key not in memo:
            memo[key] = generate(model, prompt, max_tokens)
        return memo[key]

    return ref


def workload(seed, n_min=3, n_max=8):
    """Prompts with repeats in them (so n-gram lookup finds matches) and without, greedy and
    sampled."""
    rng = random.Random(seed)
    work = []
    for _ in range(rng.randint(n_min, n_max)):
        motif = [rng.randrange(VOCAB) for _ in range(rng.randint(2, 6))]
        prompt = (
            motif * rng.randint(1, 4) + [rng.randrange(VOCAB) for _ in range(rng.randint(0, 8))]
        )[:40]
        sampled = rng.random() < 0.25
        params = SamplingParams(
            max_tokens=rng.randint(1, 24),
            ignore_eos=True,
            temperature=0.8 if sampled else 0.0,
            seed=rng.randrange(1000),
        )
        work.append((prompt, params))
    return work


CONFIGS = [
    {"method": "ngram", "num_speculative_tokens": 1},
    {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    },
    {"method": "ngram", "num_speculative_tokens": 6},
    {"method": "draft_model", "num_speculative_tokens": 2, "num_draft_layers": 1},
    {"method": "draft_model", "num_speculative_tokens": 4, "num_draft_layers": 3},
]


def run(engine, work, abort_at=None, abort_ids=()):
    """Submit all, step to the end, aborting abort_ids after step abort_at; returns {id:
    tokens}."""
    ids = [engine.add_request(p, sp) for p, sp in work]
    outs, steps = {}, 0
    while engine.has_unfinished():
        for ev in engine.step():
            if ev.output is not None:
                outs[ev.request_id] = ev.output
        steps += 1
        if steps == abort_at:
            engine.abort_request([ids[i] for i in abort_ids if ids[i] not in outs])
    return ids, outs


@pytest.mark.parametrize(
    "cfg", CONFIGS, ids=lambda c: f"{c['method']}-k{c['num_speculative_tokens']}"
)
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_tokens_equal_plain_decoding_under_preemption_and_aborts(
    model, reference, cfg, seed
):
    work = workload(seed)
    rng = random.Random(100 + seed)
    aborted = set(rng.sample(range(len(work)), 1))
    # 12 blocks of 4 tokens: fewer than the workload needs at once, so requests are preempted
    # and proposals dropped
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=12,
        max_num_batched_tokens=24,
        max_num_seqs=4,
        eos_token_id=[],
        speculative_config=cfg,
    )
    ids, outs = run(engine, work, abort_at=3, abort_ids=aborted)
    for i, (rid, (prompt, sp)) in enumerate(zip(ids, work)):
        if i in aborted and rid not in outs:
            continue
        out = outs[rid]
        assert len(out.token_ids) == sp.max_tokens and out.finish_reason == "length"
        if sp.greedy:
            assert out.token_ids == reference(prompt, sp.max_tokens), (
                f"request {i} differs with {cfg}"
            )
    assert (
        engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    )  # every block came back
    assert sum(o.num_preemptions for o in outs.values()) > 0, (
        "the workload was meant to force preemption"
    )
    st = engine.spec_stats
    assert st.num_draft_tokens > 0 and 0 <= st.num_accepted_tokens <= st.num_draft_tokens


def test_outputs_equal_transformers_generate(path, model):
    work = [p for p, _ in workload(7, 4, 4)]
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=64,
        eos_token_id=[],
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
    )
    outs = engine.generate(work, SamplingParams(max_tokens=12, ignore_eos=True))
    for prompt, out in zip(work, outs):
        assert out.token_ids == hf_generate(path, prompt, 12)


def test_target_as_its_own_draft_accepts_everything(model, reference):
    prompt = [5, 6, 7, 8, 9]
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=32,
        eos_token_id=[],
        speculative_config={
            "method": "draft_model",
            "num_speculative_tokens": 4,
            "model": model,
        },
    )
    out = engine.generate([prompt], SamplingParams(max_tokens=21, ignore_eos=True))[0]
    assert out.token_ids == reference(prompt, 21)
    # 1 token from the prefill, then 4 verifies of 4 proposals + bonus = 20 tokens in 4 forwards
    assert (out.spec.num_drafts, out.spec.num_draft_tokens, out.spec.num_accepted_tokens) == (
        4,
        16,
        16,
    )
    assert out.spec.acceptance_rate == 1.0 and out.spec.mean_accepted_length == 5.0
    assert out.spec.num_forwards == 5 and out.spec.forwards_per_token == pytest.approx(5 / 21)


def test_stop_token_inside_an_accepted_run_ends_the_request_there(model, reference):
    prompt = [11, 12, 13, 14]
    full = reference(prompt, 20)
    stop = full[6]
    cut = full.index(stop) + 1  # the first time the stop token appears
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=32,
        eos_token_id=[],
        speculative_config={
            "method": "draft_model",
            "num_speculative_tokens": 5,
            "model": model,
        },
    )
    out = engine.generate([prompt], SamplingParams(max_tokens=20, stop_token_ids=[stop]))[0]
    assert out.token_ids == full[:cut] and out.finish_reason == "stop"
    # max_tokens inside a run: 1 + 5 + 1 = 7 tokens ends mid-way through the second verify
    out = engine.generate([prompt], SamplingParams(max_tokens=9, ignore_eos=True))[0]
    assert out.token_ids == full[:9] and out.finish_reason == "length"
    assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks


def test_prefix_caching_never_files_rejected_tokens(model, reference):
    """Round 2 extends round 1's prompts + outputs: its cache hits cover blocks that round 1's
    verifies wrote,
    rejected proposals included, so any block filed with K/V that are not its tokens' would
    change round 2's tokens."""
    rng = random.Random(3)
    first = [[rng.randrange(VOCAB) for _ in range(rng.randint(3, 10))] * 2 for _ in range(4)]
    cfg = {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 2,
    }
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=48,
        eos_token_id=[],
        enable_prefix_caching=True,
        speculative_config=cfg,
    )
    # each request ends exactly on a block boundary: its last token's K/V are never computed, so
    # the block holding it must not be filed (a verify that emitted it wrote a rejected
    # proposal's K/V there, or nothing)
    params = [
        SamplingParams(max_tokens=4 * (len(p) // 4 + 5) - len(p), ignore_eos=True)
        for p in first
    ]
    outs = engine.generate(first, params)
    assert engine.spec_stats.num_accepted_tokens < engine.spec_stats.num_draft_tokens, (
        "no proposal was rejected"
    )
    second = [p + o.token_ids + [rng.randrange(VOCAB)] for p, o in zip(first, outs)]
    outs2 = engine.generate(second, SamplingParams(max_tokens=8, ignore_eos=True))
    assert sum(o.num_cached_tokens for o in outs2) > 0
    for prompt, out in zip(second, outs2):
        assert out.token_ids == reference(prompt, 8)
    assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks


def test_prefix_caching_never_files_the_unverified_last_token(model, reference):
    """The target as its own draft, k = 3, 7 prompt + 9 output tokens: the second verify's bonus
    token is the last
    one, at position 15, the end of block 3. Its K/V were never computed, so block 3 must not
    be filed; if it were, round 2 (which extends prompt + output) would read an unwritten
    slot for it."""
    cfg = {"method": "draft_model", "num_speculative_tokens": 3, "model": model}
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=32,
        eos_token_id=[],
        enable_prefix_caching=True,
        speculative_config=cfg,
    )
    prompt = [21, 22, 23, 24, 25, 26, 27]
    out = engine.generate([prompt], SamplingParams(max_tokens=9, ignore_eos=True))[0]
    assert (
        out.spec.num_drafts == 2 and out.spec.num_accepted_tokens == 6
    )  # the run this test is about
    second = prompt + out.token_ids + [30]
    out2 = engine.generate([second], SamplingParams(max_tokens=4, ignore_eos=True))[0]
    assert out2.num_cached_tokens == 12 and out2.token_ids == reference(second, 4)


def test_verify_and_plain_requests_share_one_step(model):
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=64,
        eos_token_id=[],
        record_plans=True,
        speculative_config={
            "method": "draft_model",
            "num_speculative_tokens": 3,
            "num_draft_layers": 1,
        },
    )
    engine.add_request([1, 2, 3, 1, 2, 3, 1, 2], SamplingParams(max_tokens=10, ignore_eos=True))
    engine.step()  # its prefill
    engine.add_request(list(range(40, 60)), SamplingParams(max_tokens=3, ignore_eos=True))
    engine.step()
    kinds = sorted(c.kind for c in engine.plans[-1].chunks)
    assert kinds == ["prefill", "verify"], kinds
    verify = next(c for c in engine.plans[-1].chunks if c.kind == "verify")
    assert (
        verify.num_new == 1 + len(verify.spec_token_ids) and verify.num_logits == verify.num_new
    )


def test_build_batch_takes_several_logits_rows_per_request():
    b = build_batch(
        [([1, 2, 3, 4], 0, [0], 3), ([5], 2, [1], True), ([6, 7], 0, [2], False)], 4
    )
    assert b.logits_indices.tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="need_logits=5"):
        build_batch([([1, 2], 0, [0], 5)], 4)


def test_ngram_propose_cases():
    assert ngram_propose([1, 2, 3, 9, 1, 2], 3, 1, 3) == [
        3,
        9,
        1,
    ]  # suffix [1, 2] occurred at 0
    assert ngram_propose([1, 2, 3, 4], 2, 1, 3) == []  # no suffix occurred before
    # the earliest earlier occurrence of [1], as vLLM's NgramProposer takes
    assert ngram_propose([5, 1, 7, 1, 8, 1], 2, 1, 1) == [7, 1]
    assert ngram_propose([7, 7, 7, 7], 3, 1, 1) == [7, 7, 7]  # the latest [7] has one after it
    assert ngram_propose([4, 5, 6, 0, 5, 6, 1, 4, 5, 6], 2, 1, 3) == [
        0,
        5,
    ]  # the longest suffix [4, 5, 6] wins
    assert ngram_propose([7, 7], 4, 1, 3) == [7]  # the proposal stops at the end of the context
    assert (
        ngram_propose([1, 2, 1, 2], 2, 3, 3) == []
    )  # shorter matches than prompt_lookup_min do not count


def test_truncated_draft_shares_the_targets_weights(model):
    draft = truncated_draft(model, 2)
    assert draft.cfg.num_hidden_layers == 2 and draft.layers[1] is model.layers[1]
    assert draft.lm_head.weight.data_ptr() == model.lm_head.weight.data_ptr()
    ids = torch.tensor([3, 1, 4, 1, 5])
    full = truncated_draft(model, model.cfg.num_hidden_layers)(ids)
    assert torch.equal(full, model(ids))


@pytest.mark.parametrize(
    "cfg, match",
    [
        ("ngram", "expected a dict"),
        ({"method": "eagle", "num_speculative_tokens": 2}, "method is 'eagle'"),
        ({"method": "ngram"}, "lacks num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens is 0"),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 2,
                "prompt_lookup_min": 4,
                "prompt_lookup_max": 2,
            },
            "prompt_lookup_max is 2",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "num_draft_layers": 1},
            "do not apply to method 'ngram'",
        ),
        (
            {"method": "draft_model", "num_speculative_tokens": 2, "num_draft_layers": 9},
            "num_draft_layers is 9",
        ),
        ({"method": "draft_model", "num_speculative_tokens": 2, "model": 3}, "model is 3"),
        ({"method": "ngram", "num_speculative_tokens": 2, "spec_model": "x"}, "unknown keys"),
    ],
)
def test_bad_speculative_config_is_rejected_clearly(model, cfg, match):
    with pytest.raises(ValueError, match=match):
        LLMEngine(model, block_size=4, num_blocks=8, speculative_config=cfg)


def test_draft_with_another_vocabulary_is_rejected(model, tiny_model):
    other = tiny_model(vocab_size=256)
    with pytest.raises(ValueError, match="shares the target's tokenizer"):
        LLMEngine(
            model,
            block_size=4,
            num_blocks=8,
            speculative_config={
                "method": "draft_model",
                "num_speculative_tokens": 2,
                "model": other,
            },
        )


def test_disable_by_batch_size_stops_proposals_in_a_full_batch(model, reference):
    cfg = {
        "method": "draft_model",
        "num_speculative_tokens": 2,
        "model": model,
        "disable_by_batch_size": 2,
    }
    engine = LLMEngine(
        model,
        block_size=4,
        num_blocks=64,
        eos_token_id=[],
        record_plans=True,
        speculative_config=cfg,
    )
    prompts = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (3, 6, 14)]
    outs = engine.generate(prompts, params)
    for plan in engine.plans:
        running = {c.request_id for c in plan.chunks}
        if len(running) >= 2:
            assert all(c.kind != "verify" for c in plan.chunks)
    assert engine.spec_stats.num_drafts > 0  # alone at the end, the longest request speculates
    assert [o.token_ids for o in outs] == [
        reference(p, sp.max_tokens) for p, sp in zip(prompts, params)
    ]


@pytest.mark.parametrize("cfg", CONFIGS[1:4:2], ids=lambda c: c["method"])
def test_min_p_one_samples_the_argmax_with_speculation(model, reference, cfg):
    # min_p = 1 keeps only the most likely token, so a sampled request must decode greedily; a
    # verify that forgot min_p would draw other tokens from the target's wider distribution.
    engine = LLMEngine(
        model, block_size=4, num_blocks=64, eos_token_id=[], speculative_config=cfg
    )
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 1, 9, 1, 9], [3, 4, 8, 2]]
    params = SamplingParams(max_tokens=16, ignore_eos=True, temperature=1.0, min_p=1.0, seed=0)
    outs = engine.generate(prompts, [params] * len(prompts))
    assert engine.spec_stats.num_drafts > 0
    assert [o.token_ids for o in outs] == [reference(p, 16) for p in prompts]


def test_bench_speculative_options_are_checked():
    from minillm.bench.spec import FULL_RUN, QUICK_RUN, parse_args

    args = parse_args(["--speculative", "draft", "--quick", "--k", "2"])
    assert (args.speculative, args.k, args.max_tokens) == ("draft", 2, QUICK_RUN["max_tokens"])
    assert parse_args(["--speculative", "ngram"]).rounds == FULL_RUN["rounds"]
    for bad in (["--speculative", "eagle"], ["--speculative", "ngram", "--k", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_bench_speculative_quick_run_saves_what_chapter_9_prints(tmp_path, capsys):
    import json

    from minillm.bench.spec import main

    out = tmp_path / "spec.json"
    assert main(["--speculative", "ngram", "--quick", "--save", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["identical_tokens"] is True
    assert [(r["concurrency"], r["name"]) for r in saved["rows"]] == [
        (1, "plain"),
        (1, "ngram"),
        (8, "plain"),
        (8, "ngram"),
    ]
    for r in saved["rows"]:
        assert (
            0 < r["forward_seconds"] < r["seconds"]
        )  # the forwards are part of the wall time, not all of it
        assert r["forward_ms"] and all(ms > 0 for ms in r["forward_ms"].values())
    plain_1, spec_1 = saved["rows"][:2]
    for r in saved["rows"]:  # every pass's seconds, the row's (the median) among them
        assert len(r["pass_seconds"]) == saved["workload"]["repeats"]
        assert r["seconds"] in r["pass_seconds"]
    assert plain_1["forwards_per_token"] == 1.0 and spec_1["forwards_per_token"] < 1.0
    assert any(
        int(n) > 1 for n in spec_1["forward_ms"] if int(n) <= 8
    )  # a verify: more than one query token
    assert "a batch-1 target forward (median): 1 token(s)" in capsys.readouterr().out
    for r in saved["rows"]:  # the forwards by kind are every target forward of the run
        f = r["forwards"]
        assert sum(v["seconds"] for v in f.values()) == pytest.approx(r["forward_seconds"])
        assert f["prefill"]["count"] >= 1 and r["draft_forwards"]["count"] == 0
    assert plain_1["forwards"]["verify"]["count"] == 0 and spec_1["forwards"]["verify"]["count"]


def test_bench_speculative_runs_disable_by_batch_size_as_a_third_run(tmp_path):
    import json

    from minillm.bench.spec import main

    out = tmp_path / "spec.json"
    argv = ["--speculative", "ngram", "--quick", "--disable-by-batch-size", "2"]
    assert main([*argv, "--save", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["identical_tokens"] is True and saved["workload"]["disable_by_batch_size"] == 2
    rows = {(r["concurrency"], r["name"]): r for r in saved["rows"]}
    assert list(rows) == [(c, n) for c in (1, 8) for n in ("plain", "ngram", "ngram, off at 2")]
    # one request running is under the bound: the same verifies as without it
    counts = lambda r: {kind: v["count"] for kind, v in r["forwards"].items()}  # noqa: E731
    assert counts(rows[1, "ngram, off at 2"]) == counts(rows[1, "ngram"])
    # eight running are over it: proposals only once all but one have finished
    off_8, on_8 = rows[8, "ngram, off at 2"], rows[8, "ngram"]
    assert off_8["forwards"]["verify"]["count"] < on_8["forwards"]["verify"]["count"]


def test_forward_kinds_tell_decode_verify_and_prefill_apart():
    from minillm.bench.spec import forward_kind
    from minillm.runner import build_batch

    table = [0, 1]
    decode = build_batch([([5], 3, table, True), ([6], 4, table, True)], 16)
    verify = build_batch([([5, 7, 8], 3, table, 3), ([6], 4, table, True)], 16)
    prefill = build_batch([([5, 7, 8], 0, table, True), ([6], 4, table, True)], 16)
    assert [forward_kind(b) for b in (decode, verify, prefill)] == [
        "decode",
        "verify",
        "prefill",
    ]


def test_bench_speculative_counts_the_drafts_forwards(tmp_path):
    import json

    from minillm.bench.spec import main

    out = tmp_path / "spec.json"
    assert main(["--speculative", "draft", "--quick", "--save", str(out)]) == 0
    plain_1, spec_1 = json.loads(out.read_text())["rows"][:2]
    assert plain_1["draft_forwards"]["count"] == 0
    # every verify follows at least one draft forward
    assert spec_1["draft_forwards"]["count"] >= spec_1["forwards"]["verify"]["count"] > 0
