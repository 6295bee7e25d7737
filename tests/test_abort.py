"""abort_request (vLLM's name) and closing a stream: blocks come back at once, the other
requests never notice."""

import pytest

from minillm.engine import LLMEngine
from minillm.kv_cache import generate
from minillm.sampling import SamplingParams

VOCAB = 512
WORK = {"a": ([5, 6, 7, 8, 9, 10, 11], 8), "b": ([40] * 20, 6), "c": ([3, 1, 4, 1, 5], 9)}


@pytest.fixture(scope="module")
def model(tiny_model):
    return tiny_model(seed=5, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def alone(model):
    return {rid: generate(model, p, n) for rid, (p, n) in WORK.items()}


def engine_with_all(model, **kwargs):
    engine = LLMEngine(
        model, block_size=4, max_num_batched_tokens=kwargs.pop("budget", 16), **kwargs
    )
    for rid, (p, n) in WORK.items():
        engine.add_request(p, SamplingParams(max_tokens=n), request_id=rid)
    return engine


def run_to_end(engine):
    outs = {}
    while engine.has_unfinished():
        outs.update({ev.request_id: ev.output for ev in engine.step() if ev.output is not None})
    return outs


def find(engine, rid):
    return next(
        (
            s
            for s in [*engine.scheduler.waiting, *engine.scheduler.running]
            if s.request_id == rid
        ),
        None,
    )


@pytest.mark.parametrize(
    "when, steps",
    [
        ("still waiting (never scheduled)", 0),
        ("mid chunked prefill", 1),
        ("decoding", 4),
    ],
)
@pytest.mark.parametrize("victim", ["a", "b", "c"])
def test_abort_frees_the_blocks_at_once_and_the_others_finish_as_if_alone(
    model, alone, when, steps, victim
):
    engine = engine_with_all(model)
    for _ in range(steps):
        engine.step()
    seq = find(engine, victim)
    assert seq is not None, f"{victim} should still be unfinished after {steps} steps"
    free_before, held = engine.scheduler.pool.num_free, len(seq.block_table)
    engine.abort_request(victim)
    assert engine.scheduler.pool.num_free == free_before + held, (
        "its blocks are back in the pool at once"
    )
    assert (
        find(engine, victim) is None and seq.finish_reason == "abort" and seq.block_table == []
    )
    outs = run_to_end(engine)
    assert victim not in outs, "an aborted request produces no Output"
    assert {rid: o.token_ids for rid, o in outs.items()} == {
        r: t for r, t in alone.items() if r != victim
    }
    assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks


def test_abort_a_list_of_ids(model, alone):
    engine = engine_with_all(model)
    engine.step()
    engine.abort_request(["a", "c"])
    assert {rid: o.token_ids for rid, o in run_to_end(engine).items()} == {"b": alone["b"]}


def test_abort_after_finishing_or_twice_is_a_no_op(model, alone):
    engine = engine_with_all(model)
    outs = run_to_end(engine)
    free = engine.scheduler.pool.num_free
    engine.abort_request(
        "a"
    )  # finished already: the abort arrived too late, as happens in a server
    engine.abort_request("a")
    assert engine.scheduler.pool.num_free == free and outs["a"].token_ids == alone["a"]


@pytest.mark.parametrize(
    "ids, message",
    [
        ("nope", "request_id 'nope' was never submitted to this engine"),
        (["a", "nope"], "request_id 'nope' was never submitted"),
        ([3], "request_id 3 was never submitted"),
    ],
)
def test_abort_of_an_unknown_id_raises_and_aborts_nothing(model, alone, ids, message):
    engine = engine_with_all(model)
    engine.step()
    free = engine.scheduler.pool.num_free
    with pytest.raises(ValueError, match=message):
        engine.abort_request(ids)
    assert engine.scheduler.pool.num_free == free
    assert {rid: o.token_ids for rid, o in run_to_end(engine).items()} == alone


# ---- stream: closing it early aborts what it submitted
#   -------------------------------------------


@pytest.mark.parametrize("how", ["close()", "break", "exception in the loop"])
def test_leaving_a_stream_early_aborts_its_requests(model, alone, how):
    engine = LLMEngine(model, block_size=4)
    engine.add_request(
        WORK["b"][0], SamplingParams(max_tokens=WORK["b"][1]), request_id="b"
    )  # not the stream's
    prompts = [WORK["a"][0], WORK["c"][0]]
    params = [SamplingParams(max_tokens=WORK["a"][1]), SamplingParams(max_tokens=WORK["c"][1])]
    if how == "close()":
        gen = engine.stream(prompts, params)
        next(gen)
        gen.close()
    elif how == "break":
        for _ in engine.stream(prompts, params):
            break
    else:
        with pytest.raises(KeyError):
            for _ in engine.stream(prompts, params):
                raise KeyError("the reader's code failed")
    unfinished = [s.request_id for s in [*engine.scheduler.waiting, *engine.scheduler.running]]
    assert unfinished == ["b"], "the stream's own requests are gone; the other one stays"
    held = len(engine.scheduler.running[0].block_table) if engine.scheduler.running else 0
    assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks - held
    assert run_to_end(engine)["b"].token_ids == alone["b"]


def test_aborting_one_request_mid_stream_ends_only_its_part(model, alone):
    engine = LLMEngine(model, block_size=4)
    got = {}
    prompts = [WORK["a"][0], WORK["c"][0]]
    params = [SamplingParams(max_tokens=WORK["a"][1]), SamplingParams(max_tokens=WORK["c"][1])]
    for rid, token, _ in engine.stream(prompts, params):
        got.setdefault(rid, []).append(token)
        if rid == "req-0" and len(got[rid]) == 2:
            engine.abort_request("req-0")
    assert got["req-0"] == alone["a"][:2] and got["req-1"] == alone["c"]
    assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks


def test_an_interrupted_generate_aborts_its_requests(model, alone, monkeypatch):
    engine = LLMEngine(model, block_size=4)
    real_step, calls = engine.step, []

    def step_then_interrupt():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the reader pressed Ctrl-C
        return real_step()

    monkeypatch.setattr(engine, "step", step_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        engine.generate([p for p, _ in WORK.values()], SamplingParams(max_tokens=6))
    monkeypatch.setattr(engine, "step", real_step)
    assert (
        not engine.has_unfinished()
        and engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    )
    assert (
        engine.generate([WORK["a"][0]], SamplingParams(max_tokens=8))[0].token_ids == alone["a"]
    )


def test_blocks_freed_by_an_abort_serve_later_requests_correctly(model):
    """Freed blocks still hold the aborted requests' K/V; a later request overwrites them and is
    not misled."""
    engine = engine_with_all(model, num_blocks=24)
    for _ in range(3):
        engine.step()
    engine.abort_request(["a", "b", "c"])
    assert engine.scheduler.pool.num_free == 24
    prompt = [9, 8, 7, 6, 5, 4, 3, 2, 1]
    out = engine.generate([prompt], SamplingParams(max_tokens=10))[0].token_ids
    assert out == generate(model, prompt, 10)


def test_generate_says_which_of_its_requests_were_aborted_from_elsewhere(model, monkeypatch):
    engine = LLMEngine(model, block_size=4)
    real_step, calls = engine.step, []

    def step_and_abort_one():
        calls.append(1)
        if len(calls) == 2:
            engine.abort_request(
                "req-1"
            )  # as another thread or a server's disconnect handler would
        return real_step()

    monkeypatch.setattr(engine, "step", step_and_abort_one)
    with pytest.raises(
        RuntimeError, match=r"requests \['req-1'\] were aborted before they finished"
    ):
        engine.generate([p for p, _ in WORK.values()], SamplingParams(max_tokens=6))
    assert (
        not engine.has_unfinished()
        and engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    )
