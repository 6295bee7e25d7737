"""The engine thread behind the server, without HTTP: queues in, deltas out, stops and aborts
free blocks."""

import asyncio
import time

import pytest

from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams
from minillm.serving.async_engine import AsyncEngine


@pytest.fixture(scope="module")
def engines(tiny_default_path):
    front = AsyncEngine(LLMEngine(tiny_default_path))
    yield front, LLMEngine(tiny_default_path)
    front.shutdown()
    assert not front.thread.is_alive()


async def collect(stream):
    text, last = "", None
    async for d in stream:
        assert d.error is None, d.error
        text, last = text + d.text, d
    return text, last


def idle(front, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # bounded wait for the engine thread to catch up
        s = front.stats()
        if (
            s["num_running"] == s["num_waiting"] == 0
            and s["num_free_blocks"] == s["num_blocks"]
        ):
            return s
        time.sleep(0.02)
    return front.stats()


def test_concurrent_requests_get_their_own_text_and_share_steps(engines):
    front, offline = engines
    tok = offline.tokenizer
    prompts = [
        tok("Once upon a time").input_ids,
        tok("東京は").input_ids,
        tok("def f(x):").input_ids,
    ]
    params = [SamplingParams(max_tokens=12, temperature=0.9, seed=s) for s in (1, 2, 3)]

    async def run():
        streams = [
            await front.submit(p, sp, request_id=f"a{i}")
            for i, (p, sp) in enumerate(zip(prompts, params))
        ]
        return await asyncio.gather(*(collect(s) for s in streams))

    outs = asyncio.run(run())
    for p, sp, (text, last) in zip(prompts, params, outs):
        assert text == offline.generate([p], sp)[0].text
        assert last.num_output_tokens == 12 and last.finish_reason == "length"
    assert any({"a0", "a1", "a2"} <= {c[0] for c in s.chunks} for s in front.step_log)


def test_a_stop_string_ends_the_request_in_the_engine(engines):
    front, offline = engines
    ids = offline.tokenizer("The capital of France is").input_ids
    full = offline.generate([ids], SamplingParams(max_tokens=30, seed=9, temperature=1.0))[
        0
    ].text
    stop = full[12:15]

    async def run():
        return await collect(
            await front.submit(
                ids,
                SamplingParams(max_tokens=30, seed=9, temperature=1.0),
                stop=[stop],
                request_id="s1",
            )
        )

    text, last = asyncio.run(run())
    assert (
        text == full[: full.index(stop)]
        and last.finish_reason == "stop"
        and last.num_output_tokens < 30
    )
    after = idle(front)
    assert after["num_free_blocks"] == after["num_blocks"]


def test_an_abort_frees_the_blocks_and_a_refused_request_gets_an_error(engines):
    front, offline = engines

    async def run():
        stream = await front.submit(
            [1, 2, 3], SamplingParams(max_tokens=3000, ignore_eos=True), request_id="long"
        )
        for _ in range(3):
            await stream.__anext__()
        held = front.stats()
        stream.abort()
        bad = await front.submit([10**8], SamplingParams(max_tokens=2), request_id="bad")
        return held, await bad.__anext__()

    held, refused = asyncio.run(run())
    assert held["num_running"] == 1 and held["num_free_blocks"] < held["num_blocks"]
    assert refused.error is not None and "prompt[0]" in refused.error
    after = idle(front)
    assert after["num_running"] == 0 and after["num_free_blocks"] == after["num_blocks"], after


def test_a_reader_that_falls_behind_is_cut_off_and_its_blocks_freed(tiny_default_path):
    """Backpressure: a reader more than max_unread_tokens behind gets what was queued, then an
    "abort"; the engine stops generating for it (it is not paused holding its blocks)."""
    front = AsyncEngine(LLMEngine(tiny_default_path), max_unread_tokens=8)
    try:

        async def run():
            slow = await front.submit(
                [1, 2, 3], SamplingParams(max_tokens=500, ignore_eos=True), request_id="slow"
            )
            # nobody reads meanwhile; first wait until the engine thread has taken the request
            # (until then the engine looks idle too), seen as its first delta in the queue
            deadline = time.monotonic() + 20
            while slow.out.qsize() == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            after = await asyncio.to_thread(idle, front)
            return after, [d async for d in slow]

        after, deltas = asyncio.run(run())
    finally:
        front.shutdown()
    assert after["num_running"] == 0 and after["num_free_blocks"] == after["num_blocks"]
    # 9 tokens sent before the 9th unread one crossed the bound, then the abort
    assert [len(d.token_ids) for d in deltas] == [1] * 9 + [0]
    assert deltas[-1].finish_reason == "abort" and deltas[-1].num_output_tokens == 9
    assert all(d.finish_reason is None for d in deltas[:-1])


def test_max_unread_tokens_must_be_a_positive_int(tiny_default_path):
    with pytest.raises(ValueError, match=r"max_unread_tokens is 0: expected an int >= 1"):
        AsyncEngine(LLMEngine(tiny_default_path), max_unread_tokens=0)


def test_a_stop_token_ends_the_text_without_its_own(engines):
    """As in vLLM: the token that stops a request (EOS, stop_token_ids) is in its token ids, not
    in its text (a chat answer does not end with '<|im_end|>')."""
    front, offline = engines
    ids = offline.tokenizer("Once upon a time").input_ids
    full = offline.generate([ids], SamplingParams(max_tokens=12, ignore_eos=True))[0].token_ids
    k = 5
    stop = full[k]
    first = full.index(stop)  # the request stops at the first time the model says it

    async def run():
        stream = await front.submit(
            ids,
            SamplingParams(max_tokens=12, ignore_eos=True, stop_token_ids=[stop]),
            request_id="stop-token",
        )
        out = [d async for d in stream]
        return "".join(d.text for d in out), [t for d in out for t in d.token_ids], out[-1]

    text, tokens, last = asyncio.run(run())
    assert tokens == full[: first + 1] and last.finish_reason == "stop"
    assert text == offline.tokenizer.decode(full[:first])


def test_a_grammar_that_ends_on_an_ordinary_token_keeps_its_text(engines):
    """Only a stop token's text is left out: a request whose grammar is complete after an
    ordinary token (no EOS to wait for: ignore_eos) ends with "stop" and keeps that token's
    text, so a JSON answer keeps its closing brace."""
    front, offline = engines
    ids = offline.tokenizer("Answer:").input_ids
    params = SamplingParams(
        max_tokens=16, ignore_eos=True, structured_outputs={"choice": ["yes", "no"]}
    )
    expected = offline.generate([ids], params)[0]

    async def run():
        stream = await front.submit(ids, params, request_id="grammar-end")
        out = [d async for d in stream]
        return "".join(d.text for d in out), [t for d in out for t in d.token_ids], out[-1]

    text, tokens, last = asyncio.run(run())
    assert tokens == expected.token_ids and last.finish_reason == "stop"
    assert text == offline.tokenizer.decode(expected.token_ids) and text in ("yes", "no")


def test_the_request_log_splits_each_ttft_in_order(engines):
    front, offline = engines
    ids = offline.tokenizer("Once upon a time").input_ids

    async def run():
        streams = [
            await front.submit(ids, SamplingParams(max_tokens=4), request_id=f"log{i}")
            for i in range(3)
        ]
        return await asyncio.gather(*(collect(s) for s in streams))

    asyncio.run(run())
    logged = {r.request_id: r for r in front.request_log if r.request_id.startswith("log")}
    assert set(logged) == {"log0", "log1", "log2"}  # one record each, at its first token
    for r in logged.values():
        assert 0 <= r.submitted <= r.taken <= r.scheduled < r.first_token


def test_the_request_log_times_the_first_deltas_way_out_and_an_abort(engines):
    front, offline = engines
    ids = offline.tokenizer("Once upon a time").input_ids

    async def run():
        read = await front.submit(ids, SamplingParams(max_tokens=4), request_id="out0")
        await collect(read)
        left = await front.submit(
            ids, SamplingParams(max_tokens=2000, ignore_eos=True), request_id="out1"
        )
        await left.__anext__()  # its first token: then the reader leaves
        left.abort()

    asyncio.run(run())
    idle(front)
    logged = {r.request_id: r for r in front.request_log if r.request_id.startswith("out")}
    for r in logged.values():  # handed to the event loop, then taken by the reader
        assert r.first_token <= r.handed <= r.read
        assert r.written is None  # no HTTP here: only the server sets it
    assert logged["out0"].abort_queued is None and logged["out0"].aborted is None
    assert logged["out1"].read <= logged["out1"].abort_queued <= logged["out1"].aborted
    assert logged["out1"].aborted <= front.clock()
