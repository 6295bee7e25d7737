"""The OpenAI-compatible server, end to end: a real `python -m minillm serve` on a free loopback
port,
called with the official openai client (and raw httpx for the error table)."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from minillm.bench.server_process import LaunchedServer
from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams

KEY = "test-key-8"
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "1, 2, 3,",
    "Hello",
    "¿Qué tal?",
    "東京は",
    "print(",
]


@pytest.fixture(scope="module")
def server(tiny_default_path):
    srv = LaunchedServer(tiny_default_path, max_num_seqs=16, api_key=KEY)
    try:
        yield srv.wait_ready(timeout=180)
    finally:
        srv.stop()  # every server a test starts is stopped
    assert srv.proc.poll() is not None


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    yield c
    c.close()


@pytest.fixture(scope="module")
def offline(tiny_default_path):
    return LLMEngine(tiny_default_path)


@pytest.fixture(scope="module")
def name(tiny_default_path):
    return tiny_default_path.name


def stats(server):
    return httpx.get(
        server.url + "/stats", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    ).json()


def streamed_text(stream) -> tuple[str, str | None]:
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def test_streamed_equals_non_streamed_equals_offline_engine(client, offline, name):
    for i, prompt in enumerate(PROMPTS[:4]):
        kw = dict(
            model=name, prompt=prompt, max_tokens=24, temperature=0.8, top_p=0.9, seed=100 + i
        )
        full = client.completions.create(**kw)
        text, finish = streamed_text(client.completions.create(**kw, stream=True))
        want = offline.generate(
            [prompt], SamplingParams(max_tokens=24, temperature=0.8, top_p=0.9, seed=100 + i)
        )[0]
        assert full.choices[0].text == text == want.text, (
            prompt,
            full.choices[0].text,
            text,
            want.text,
        )
        assert full.choices[0].finish_reason == finish == want.finish_reason
        assert full.usage.prompt_tokens == len(
            want.prompt_ids
        ) and full.usage.completion_tokens == len(want.token_ids)


def test_token_id_prompts_and_token_ids_back(client, offline, name):
    ids = [9707, 11, 1879, 0, 151]
    full = client.completions.create(
        model=name, prompt=ids, max_tokens=10, extra_body={"return_token_ids": True}
    )
    want = offline.generate([ids], SamplingParams(max_tokens=10))[0]
    assert full.choices[0].token_ids == want.token_ids and full.choices[0].text == want.text


def test_stop_strings_cut_the_text_streamed_or_not(client, offline, name):
    want = offline.generate(
        [PROMPTS[1]], SamplingParams(max_tokens=30, seed=5, temperature=1.0)
    )[0].text
    stop = want[
        len(want) // 2 : len(want) // 2 + 3
    ]  # three characters from the middle of the full text
    kw = dict(
        model=name,
        prompt=PROMPTS[1],
        max_tokens=30,
        seed=5,
        temperature=1.0,
        stop=[stop, "never-seen"],
    )
    full = client.completions.create(**kw)
    text, finish = streamed_text(client.completions.create(**kw, stream=True))
    assert full.choices[0].text == text == want[: want.index(stop)]
    assert full.choices[0].finish_reason == finish == "stop"


def test_chat_uses_the_chat_template(client, offline, name):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
    ]
    full = client.chat.completions.create(
        model=name, messages=messages, max_tokens=12, seed=1, temperature=0.5
    )
    text = ""
    for chunk in client.chat.completions.create(
        model=name, messages=messages, max_tokens=12, seed=1, temperature=0.5, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    ids = offline.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    want = offline.generate(
        [offline.tokenizer(ids, add_special_tokens=False).input_ids],
        SamplingParams(max_tokens=12, seed=1, temperature=0.5),
    )[0]
    assert full.choices[0].message.content == text == want.text
    assert full.usage.prompt_tokens == len(want.prompt_ids)


def test_eight_concurrent_clients_are_batched_and_each_gets_its_own_output(
    server, offline, name
):
    params = [
        dict(prompt=p, max_tokens=32, temperature=0.9, seed=7 + i)
        for i, p in enumerate(PROMPTS)
    ]

    async def all_at_once():
        async with openai.AsyncOpenAI(
            base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120
        ) as c:
            return await asyncio.gather(
                *(c.completions.create(model=name, **kw) for kw in params)
            )

    outs = asyncio.run(all_at_once())
    for kw, out in zip(params, outs):
        alone = offline.generate(
            [kw["prompt"]], SamplingParams(max_tokens=32, temperature=0.9, seed=kw["seed"])
        )[0]
        assert out.choices[0].text == alone.text, kw
    ids = {o.id for o in outs}
    steps = httpx.get(
        server.url + "/step_log",
        params={"last": 2000},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=10,
    ).json()["steps"]
    together = max(len(ids & {c["request_id"] for c in s["chunks"]}) for s in steps)
    print(f"at most {together} of the 8 requests in one step")
    assert together >= 4, (
        f"the step log never shows more than {together} of the 8 requests in one step"
    )


def test_a_client_that_disconnects_mid_stream_frees_its_blocks(server, client, name):
    before = stats(server)
    assert before["num_running"] == 0 and before["num_free_blocks"] == before["num_blocks"]
    stream = client.completions.create(
        model=name,
        prompt=PROMPTS[0],
        max_tokens=3000,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    got = 0
    for _chunk in stream:
        got += 1
        if got == 5:
            break
    held = stats(server)
    assert held["num_running"] == 1 and held["num_free_blocks"] < held["num_blocks"], held
    stream.close()  # the client goes away after 5 of 3000 tokens
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # bounded: the abort must land within a few steps
        now = stats(server)
        if now["num_running"] == 0 and now["num_free_blocks"] == now["num_blocks"]:
            break
        time.sleep(0.05)
    assert now["num_running"] == 0 and now["num_free_blocks"] == now["num_blocks"], now
    # it was cut off early: far fewer steps ran than 3000 tokens would need
    assert now["num_steps"] - held["num_steps"] < 1000


def test_a_non_streamed_client_that_leaves_frees_its_blocks(server, name):
    body = {"model": name, "prompt": "Hi", "max_tokens": 3000, "ignore_eos": True}
    with pytest.raises(
        httpx.ReadTimeout
    ):  # the client gives up after a second and closes the connection
        httpx.post(
            server.url + "/v1/completions",
            json=body,
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=1.0,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        now = stats(server)
        if now["num_running"] == 0 and now["num_free_blocks"] == now["num_blocks"]:
            break
        time.sleep(0.05)
    assert now["num_running"] == 0 and now["num_free_blocks"] == now["num_blocks"], now


BAD = [  # (path, body changes, status, the field the message must name)
    ("completions", {"temperature": "hot"}, 400, "temperature"),
    ("completions", {"temperature": 7}, 400, "temperature"),
    ("completions", {"max_tokens": 0}, 400, "max_tokens"),
    ("completions", {"max_tokens": 1.5}, 400, "max_tokens"),
    ("completions", {"top_p": 0}, 400, "top_p"),
    ("completions", {"top_k": -1}, 400, "top_k"),
    ("completions", {"seed": -3}, 400, "seed"),
    ("completions", {"n": 0}, 400, "n"),
    ("completions", {"stop": ""}, 400, "stop"),
    ("completions", {"stop_token_ids": [10**9]}, 400, "stop_token_ids"),
    ("completions", {"prompt": ""}, 400, "prompt"),
    ("completions", {"prompt": 17}, 400, "prompt"),
    ("completions", {"prompt": [5, 10**8]}, 400, "prompt"),
    ("completions", {"prompt": [1] * 5000}, 400, "prompt"),  # longer than the model's context
    ("completions", {"max_tokens": 4096}, 400, "max_tokens"),  # fits alone, not with the prompt
    ("completions", {"stream": "yes"}, 400, "stream"),
    ("completions", {"cache_salt": ""}, 400, "cache_salt"),
    ("completions", {"frequency_penalty": 3}, 400, "frequency_penalty"),
    ("completions", {"presence_penalty": "x"}, 400, "presence_penalty"),
    ("completions", {"repetition_penalty": 0}, 400, "repetition_penalty"),
    ("completions", {"min_p": 1.5}, 400, "min_p"),
    ("completions", {"logit_bias": {"5": 101}}, 400, "logit_bias"),
    ("completions", {"logit_bias": {"999999999": 1}}, 400, "logit_bias"),
    ("completions", {"logprobs": 21}, 400, "logprobs"),
    ("completions", {"echo": "yes"}, 400, "echo"),
    ("completions", {"prompt": [[1, 2], "x"]}, 400, "prompt"),
    ("completions", {"prompt": ["a", ""]}, 400, "prompt"),
    ("completions", {"tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    (
        "completions",
        {"stream_options": {"continuous_usage_stats": 3}},
        400,
        "stream_options.continuous_usage_stats",
    ),
    ("chat/completions", {"response_format": {"type": "xml"}}, 400, "response_format"),
    (
        "chat/completions",
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        400,
        "tools",
    ),
    ("chat/completions", {"top_logprobs": 2}, 400, "top_logprobs"),
    ("chat/completions", {"logprobs": 1}, 400, "logprobs"),
    (
        "chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        400,
        "messages.0.content",
    ),
    ("completions", {"model": "gpt-9"}, 404, "model"),
    ("chat/completions", {"messages": []}, 400, "messages"),
    (
        "chat/completions",
        {"messages": [{"role": "robot", "content": "hi"}]},
        400,
        "messages.0.role",
    ),
]


@pytest.mark.parametrize(
    "path,change,status,field", BAD, ids=[f"{p}-{f}-{s}" for p, _, s, f in BAD]
)
def test_bad_requests_get_their_status_and_name_the_field(
    server, name, path, change, status, field
):
    body = {"model": name, "max_tokens": 4}
    body.update(
        {"prompt": "Hi"}
        if path == "completions"
        else {"messages": [{"role": "user", "content": "Hi"}]}
    )
    body.update(change)
    r = httpx.post(
        f"{server.url}/v1/{path}",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == field and field in err["message"], err
    assert err["code"] == status


def test_the_openai_client_raises_on_a_bad_request_and_the_server_keeps_serving(client, name):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=name, prompt="Hi", max_tokens=4, temperature=-1)
    assert e.value.status_code == 400 and "temperature" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="Hi", max_tokens=4)
    assert (
        client.completions.create(model=name, prompt="Hi", max_tokens=3).usage.completion_tokens
        == 3
    )


def test_the_api_key_is_enforced(server, name):
    body = {"model": name, "prompt": "Hi", "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = httpx.post(server.url + "/v1/completions", json=body, headers=headers, timeout=30)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", (
            r.text
        )
    assert httpx.get(server.url + "/v1/models", timeout=10).status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert (
        httpx.get(server.url + "/health", timeout=10).status_code == 200
    )  # open, for load balancers
    ok = httpx.get(
        server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    )
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == name


def test_unknown_routes_are_404_in_openai_shape(server):
    r = httpx.get(
        server.url + "/v1/nothing-here", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    )
    assert r.status_code == 404 and "/v1/nothing-here" in r.json()["error"]["message"]


def test_serve_binds_loopback_by_default_and_checks_its_options_first():
    import argparse

    from minillm.cli.serve_args import add_serve_args

    p = argparse.ArgumentParser()
    add_serve_args(p)
    assert (
        p.parse_args([]).host == "127.0.0.1"
        and p.parse_args(["--host", "localhost"]).host == "127.0.0.1"
    )
    for bad in (
        ["--host", "example.com"],
        ["--port", "0"],
        ["--port", "70000"],
        ["--max-num-seqs", "0"],
    ):
        with pytest.raises(SystemExit):
            p.parse_args(bad)  # refused by argparse, before any model is loaded
