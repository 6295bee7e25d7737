"""The engine end to end: batched greedy output equals one-at-a-time generation token by
token."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.engine import LLMEngine
from minillm.kv_cache import generate
from minillm.sampling import SamplingParams

VOCAB = 512


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The small model's ops are too small to split across threads; one thread avoids OpenMP
    stalls on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model(tiny_model):
    """conftest's small Qwen3 (vocab 512): a step takes about a millisecond."""
    return tiny_model(seed=5, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def reference(model):
    """One-at-a-time greedy generation with the contiguous KV cache (chapter 2), memoised."""
    memo = {}

    def ref(prompt, max_tokens):
        key = (tuple(prompt), max_tokens)
        if key not in memo:
            memo[key] = generate(model, prompt, max_tokens)
        return memo[key]

    return ref


def random_workload(seed, n_min=5, n_max=30):
    rng = random.Random(seed)
    return [
        ([rng.randrange(VOCAB) for _ in range(rng.randint(1, 40))], rng.randint(1, 16))
        for _ in range(rng.randint(n_min, n_max))
    ]


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    block_size=st.sampled_from([2, 4, 16]),
    num_blocks=st.integers(4, 40),
    budget=st.integers(4, 64),
    max_seqs=st.integers(1, 12),
)
def test_batched_greedy_equals_one_at_a_time(
    model, reference, seed, block_size, num_blocks, budget, max_seqs
):
    work = random_workload(seed)
    need = max(-(-(len(p) + m - 1) // block_size) for p, m in work)
    engine = LLMEngine(
        model,
        block_size=block_size,
        num_blocks=max(num_blocks, need),
        max_num_batched_tokens=budget,
        max_num_seqs=max_seqs,
    )
    order = list(range(len(work)))
    random.Random(seed).shuffle(order)  # random arrival order
    ids = {
        engine.add_request(work[i][0], SamplingParams(max_tokens=work[i][1])): i for i in order
    }
    done = []
    while engine.has_unfinished():
        done += [ev.output for ev in engine.step() if ev.output is not None]
    assert sorted(o.request_id for o in done) == sorted(ids), (
        "every request finishes exactly once"
    )
    for o in done:
        prompt, max_tokens = work[ids[o.request_id]]
        assert o.token_ids == reference(prompt, max_tokens), (
            f"request {o.request_id} differs from one-at-a-time"
        )
        assert o.finish_reason == "length"


def test_tiny_pool_preempts_and_still_matches(model, reference):
    work = random_workload(3, n_min=12, n_max=12)
    engine = LLMEngine(
        model, block_size=4, num_blocks=16, max_num_batched_tokens=64, max_num_seqs=12
    )
    outs = engine.generate(
        [p for p, _ in work], [SamplingParams(max_tokens=m) for _, m in work]
    )
    assert sum(o.num_preemptions for o in outs) > 0, (
        "the pool is meant to be too small for all at once"
    )
    assert [o.token_ids for o in outs] == [reference(p, m) for p, m in work]


def test_seeded_sampling_is_the_same_alone_and_in_a_batch(model):
    sp = SamplingParams(max_tokens=12, temperature=1.0, top_k=50, top_p=0.9, seed=1234)
    alone = LLMEngine(model).generate([[5, 6, 7, 8]], sp)[0].token_ids
    crowd = [[9, 10], [11] * 30, [5, 6, 7, 8], [100, 200, 300]]
    mixed = [SamplingParams(max_tokens=8, temperature=0.8, seed=i) for i in range(3)]
    together = LLMEngine(model, max_num_batched_tokens=16).generate(
        crowd, mixed[:2] + [sp] + mixed[2:]
    )
    assert together[2].token_ids == alone
    assert len(set(alone)) > 1, "a sampled sequence should not be constant"


def test_unseeded_requests_follow_the_engine_seed(model):
    sp = SamplingParams(max_tokens=6, temperature=1.0)
    a = LLMEngine(model, seed=1).generate([[1, 2, 3]] * 2, sp)
    b = LLMEngine(model, seed=1).generate([[1, 2, 3]] * 2, sp)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert a[0].token_ids != a[1].token_ids, "two requests get two different seeds"


@pytest.mark.parametrize(
    "prompt, params, rid, words",
    [
        ([], SamplingParams(), None, "empty prompt"),
        ([1] * 60, SamplingParams(max_tokens=10), None, "beyond the model's context of 64"),
        ([1, 2], SamplingParams(), "keep", "'keep' was already submitted"),
        ([1, VOCAB], SamplingParams(), None, f"token id {VOCAB}"),
        ("text", SamplingParams(), None, "no tokenizer"),
    ],
)
def test_bad_request_is_rejected_without_disturbing_others(
    model, reference, prompt, params, rid, words
):
    engine = LLMEngine(model, max_model_len=64, max_num_batched_tokens=8)
    engine.add_request([3, 4, 5, 6, 7], SamplingParams(max_tokens=6), request_id="keep")
    engine.step()  # "keep" is mid-flight
    with pytest.raises(ValueError, match=words):
        engine.add_request(prompt, params, request_id=rid)
    outs = []
    while engine.has_unfinished():
        outs += [ev.output for ev in engine.step() if ev.output is not None]
    assert [(o.request_id, o.token_ids) for o in outs] == [
        ("keep", reference([3, 4, 5, 6, 7], 6))
    ]


def test_generate_with_one_bad_prompt_queues_nothing(model):
    engine = LLMEngine(model)
    with pytest.raises(ValueError, match="empty prompt"):
        engine.generate([[1, 2], [], [3]], SamplingParams(max_tokens=2))
    assert not engine.has_unfinished()


def test_stop_token_ends_the_request(model, reference):
    full = reference([7, 8, 9], 8)
    out = LLMEngine(model).generate(
        [[7, 8, 9]], SamplingParams(max_tokens=8, stop_token_ids=[full[2]])
    )[0]
    assert out.token_ids == full[: full.index(full[2]) + 1] and out.finish_reason == "stop"


def test_stream_yields_the_tokens_generate_returns(model, reference):
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9]]
    got = {}
    for rid, token, text in LLMEngine(model).stream(prompts, SamplingParams(max_tokens=5)):
        got.setdefault(rid, []).append(token)
        assert text == ""  # no tokenizer: no text
    assert list(got.values()) == [reference(p, 5) for p in prompts]


def test_outputs_carry_latencies(model):
    out = LLMEngine(model).generate([[1, 2, 3]], SamplingParams(max_tokens=5))[0]
    assert out.ttft > 0 and len(out.itl) == 4 and all(t >= 0 for t in out.itl)
    assert out.latency >= out.ttft


def test_plans_record_prefill_chunks_and_decodes(model):
    engine = LLMEngine(model, max_num_batched_tokens=8, record_plans=True)
    engine.generate([[1] * 12, [2] * 3], SamplingParams(max_tokens=3))
    first, second = engine.plans[0].chunks, engine.plans[1].chunks
    assert [(c.request_id, c.kind, c.num_new) for c in first] == [("req-0", "prefill", 8)]
    assert [(c.kind, c.num_new) for c in second] == [("prefill", 4), ("prefill", 3)]
    assert all(p.num_tokens <= 8 for p in engine.plans)


def test_bench_quick_run_saves_a_table(tmp_path, capsys):
    import json

    from minillm.bench.throughput import main

    out = tmp_path / "bench.json"
    code = main(["--quick", "--no-hf", "--save", str(out)])
    printed = capsys.readouterr().out
    # A quick run's few milliseconds can look like an artifact on a busy machine: then the run
    # says so and exits 1 (test_bench proves the check on fixed numbers). The table is saved
    # either way.
    assert code == (1 if "ARTIFACT" in printed else 0), printed
    result = json.loads(out.read_text())
    assert [r["concurrency"] for r in result["rows"]] == [1, 2, 4]
    assert (
        result["one_at_a_time_tokens_per_s"] > 0 and result["single_request_latency_ratio"] > 0
    )
    assert "single-request latency" in printed


def test_string_prompts_use_the_checkpoint_tokenizer(tiny_default_path):
    from minillm.checkpoints import load_tokenizer
    from minillm.model import Transformer

    tok = load_tokenizer(tiny_default_path)
    engine = LLMEngine(Transformer.from_pretrained(tiny_default_path), tokenizer=tok)
    out = engine.generate("Hello, world", SamplingParams(max_tokens=4, ignore_eos=True))[0]
    assert out.prompt_ids == tok("Hello, world").input_ids
    assert out.text == tok.decode(out.token_ids) and len(out.token_ids) == 4


def test_a_stop_token_is_in_the_token_ids_but_not_in_the_text(tiny_default_path):
    """As in vLLM's offline LLM and this engine's server: the token that stopped the request
    (here a stop_token_ids entry) ends its token ids, and its text is left out."""
    from minillm.checkpoints import load_tokenizer

    tok = load_tokenizer(tiny_default_path)
    engine = LLMEngine(tiny_default_path, tokenizer=tok)
    free = engine.generate("Hello", SamplingParams(max_tokens=6, ignore_eos=True))[0]
    stop = free.token_ids[3]
    first = free.token_ids.index(stop)
    out = engine.generate(
        "Hello", SamplingParams(max_tokens=6, ignore_eos=True, stop_token_ids=[stop])
    )[0]
    assert out.finish_reason == "stop" and out.token_ids == free.token_ids[: first + 1]
    assert out.text == tok.decode(free.token_ids[:first])
    assert free.finish_reason == "length" and free.text == tok.decode(free.token_ids)
    streamed = engine.stream(
        ["Hello"], SamplingParams(max_tokens=6, ignore_eos=True, stop_token_ids=[stop])
    )
    assert "".join(delta for _, _, delta in streamed) == out.text  # the stream says the same


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_batched_greedy_equals_one_at_a_time_on_cuda(model):
    gpu = model.to("cuda")
    try:
        work = random_workload(11, n_min=8, n_max=8)
        engine = LLMEngine(
            gpu, block_size=4, num_blocks=24, max_num_batched_tokens=32, max_num_seqs=6
        )
        outs = engine.generate(
            [p for p, _ in work], [SamplingParams(max_tokens=m) for _, m in work]
        )
        assert [o.token_ids for o in outs] == [generate(gpu, p, m) for p, m in work]
    finally:
        model.to("cpu")


def test_a_rejected_request_changes_no_ids_or_seeds(model):
    sp = SamplingParams(max_tokens=5, temperature=1.0)
    clean = LLMEngine(model, seed=4)
    clean_id = clean.add_request([1, 2, 3], sp)
    disturbed = LLMEngine(model, seed=4)
    with pytest.raises(ValueError):
        disturbed.add_request([], sp)
    assert disturbed.add_request([1, 2, 3], sp) == clean_id == "req-0"
    run = lambda e: [ev.token_id for _ in range(5) for ev in e.step()]  # noqa: E731
    assert run(disturbed) == run(clean)
