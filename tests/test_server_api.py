"""The server as eval harnesses and client libraries use it: every completions prompt form, echo
with
prompt logprobs (lm-eval's request shapes), n, logprobs, penalties, chat as clients send it,
and the operator's routes (/metrics, /tokenize, /detokenize, /version, /v1/models/{id},
/tokenizer_info)."""

from __future__ import annotations

import math

import httpx
import openai
import pytest
import torch

from minillm.bench.server_process import LaunchedServer
from minillm.checks.reference import hf_logits
from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams

KEY = "key-api"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_LEN = 128  # the server's context: chat without max_tokens generates up to the rest of it


@pytest.fixture(scope="module")
def server(tiny_default_path):
    srv = LaunchedServer(
        tiny_default_path, api_key=KEY, extra=["--max-model-len", str(MAX_LEN)]
    )
    try:
        yield srv.wait_ready(timeout=180)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def offline(tiny_default_path):
    return LLMEngine(tiny_default_path, max_model_len=MAX_LEN)


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120
    ) as c:
        yield c


def post(server, path: str, body: dict, status: int = 200) -> dict:
    r = httpx.post(server.url + path, json=body, headers=AUTH, timeout=120)
    assert r.status_code == status, r.text
    return r.json()


def test_every_prompt_form_gives_one_choice_per_prompt_in_order(server, offline, tokenizer):
    texts = ["The capital of France is", "Hello", "1, 2, 3,"]
    ids = [list(tokenizer(t).input_ids) for t in texts]
    want = [
        o.token_ids
        for o in offline.generate(texts, SamplingParams(max_tokens=5, ignore_eos=True))
    ]
    for prompt in (texts, ids, ids[0], texts[0]):
        body = post(
            server,
            "/v1/completions",
            {"prompt": prompt, "max_tokens": 5, "ignore_eos": True, "return_token_ids": True},
        )  # no "model": one model is served
        n = 1 if prompt in (ids[0], texts[0]) else 3
        assert [c["index"] for c in body["choices"]] == list(range(n))
        assert [c["token_ids"] for c in body["choices"]] == want[:n]
        assert body["usage"]["prompt_tokens"] == sum(map(len, ids[:n]))
        assert body["usage"]["completion_tokens"] == 5 * n


def test_n_choices_are_indexed_prompt_major_and_streamed_interleaved(server):
    body = post(
        server,
        "/v1/completions",
        {
            "prompt": ["a b", "c d"],
            "n": 2,
            "max_tokens": 4,
            "temperature": 1.0,
            "seed": 5,
            "ignore_eos": True,
            "return_token_ids": True,
        },
    )
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["completion_tokens"] == 16
    lines = []
    with httpx.stream(
        "POST",
        server.url + "/v1/completions",
        headers=AUTH,
        timeout=120,
        json={
            "prompt": ["a b", "c d"],
            "n": 2,
            "max_tokens": 4,
            "temperature": 1.0,
            "seed": 5,
            "ignore_eos": True,
            "return_token_ids": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: {")]
    import json

    chunks = [json.loads(line[6:]) for line in lines]
    got = {}
    for c in chunks[:-1]:
        assert c["usage"] is not None  # continuous_usage_stats
        for ch in c["choices"]:
            got.setdefault(ch["index"], []).extend(ch["token_ids"])
    assert got == {c["index"]: c["token_ids"] for c in body["choices"]}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 16


def test_lm_eval_loglikelihood_request_returns_the_prompt_logprobs_of_transformers(
    server, tiny_default_path
):
    ctx, cont = (
        [785, 6722, 315, 9625, 374],
        [12095, 13],
    )  # lm-eval sends context + continuation ids
    prompts = [ctx + cont, ctx + [220]]
    body = post(
        server,
        "/v1/completions",
        {
            "model": tiny_default_path.name,
            "prompt": prompts,
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": 1,
            "echo": True,
            "seed": 1234,
        },
    )
    assert len(body["choices"]) == 2
    for choice, ids in zip(body["choices"], prompts):
        lp = choice["logprobs"]
        assert (
            len(lp["tokens"])
            == len(lp["token_logprobs"])
            == len(lp["top_logprobs"])
            == len(ids) + 1
        )
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        ref = hf_logits(tiny_default_path, ids).float().log_softmax(-1)
        want = ref[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
        got = torch.tensor(lp["token_logprobs"][1 : len(ids)])
        assert (got - want).abs().max() < 1e-4
        for tok, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
            assert (
                tok in top.values() and max(top.values()) >= tok
            )  # how lm-eval tests is_greedy
        assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
        assert choice["text"].startswith(choice["text"][: len(lp["tokens"][0])])
    alone = post(
        server,
        "/v1/completions",
        {"prompt": prompts[0], "max_tokens": 0, "echo": True, "logprobs": 0},
    )
    lp = alone["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(prompts[0]) and alone["usage"]["completion_tokens"] == 0
    assert alone["choices"][0]["finish_reason"] == "length"


def test_lm_eval_batched_generation_request_with_16_strings(server):
    prompts = [f"Question {i}: what is {i} + {i}?\nAnswer:" for i in range(16)]
    body = post(
        server,
        "/v1/completions",
        {"prompt": prompts, "max_tokens": 8, "temperature": 0, "stop": ["\n\n"], "seed": 1234},
    )
    assert [c["index"] for c in body["choices"]] == list(range(16))
    assert all(
        isinstance(c["text"], str) and c["finish_reason"] in ("stop", "length")
        for c in body["choices"]
    )


def test_official_client_n_logprobs_echo_and_penalties(client, server):
    out = client.completions.create(
        model=server_name(server),
        prompt="Once upon a time",
        n=2,
        max_tokens=6,
        temperature=1.0,
        seed=3,
        logprobs=2,
        echo=True,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        extra_body={"repetition_penalty": 1.2, "min_p": 0.01},
    )
    assert len(out.choices) == 2 and out.choices[0].text.startswith("Once upon a time")
    for c in out.choices:
        assert c.logprobs.token_logprobs[0] is None and len(c.logprobs.tokens) == 4 + 6
        assert all(len(t) >= 1 for t in c.logprobs.top_logprobs[1:])
    chat = client.chat.completions.create(
        model=server_name(server),
        n=2,
        max_tokens=5,
        logprobs=True,
        top_logprobs=3,
        temperature=0.8,
        seed=1,
        messages=[{"role": "user", "content": "Hi"}],
        logit_bias={"15": 1},
    )
    assert len(chat.choices) == 2
    for c in chat.choices:
        assert len(c.logprobs.content) == chat.usage.completion_tokens // 2
        for item in c.logprobs.content:
            assert (
                len(item.top_logprobs) == 3
                and item.logprob <= 0
                and math.isfinite(item.logprob)
            )


def server_name(server) -> str:
    return httpx.get(server.url + "/v1/models", headers=AUTH, timeout=10).json()["data"][0][
        "id"
    ]


def test_chat_as_clients_send_it(server):
    msgs = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}],
        },
    ]
    body = post(
        server,
        "/v1/chat/completions",
        {
            "messages": msgs,
            "temperature": 0,
            "ignore_eos": True,
            "parallel_tool_calls": True,
            "some_vllm_extension": 1,
            "stream_options": None,
        },
    )
    prompt = body["usage"]["prompt_tokens"]
    # no max_tokens: the rest of the context, not the engine's default of 16
    assert body["usage"]["completion_tokens"] == MAX_LEN - prompt
    assert body["choices"][0]["finish_reason"] == "length"


def test_operator_routes(server, tokenizer):
    ids = post(server, "/tokenize", {"prompt": "Hello world"})
    assert ids["tokens"] == list(tokenizer("Hello world").input_ids) and ids["count"] == len(
        ids["tokens"]
    )
    assert post(server, "/detokenize", {"tokens": ids["tokens"]})["prompt"] == "Hello world"
    assert post(server, "/detokenize", {"tokens": [-1]}, 400)["error"]["param"] == "tokens"
    assert httpx.get(server.url + "/version", timeout=10).json()["version"]
    name = server_name(server)
    assert (
        httpx.get(f"{server.url}/v1/models/{name}", headers=AUTH, timeout=10).json()["id"]
        == name
    )
    r = httpx.get(f"{server.url}/v1/models/nope", headers=AUTH, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    info = httpx.get(server.url + "/tokenizer_info", headers=AUTH, timeout=10).json()
    assert info["tokenizer_class"] and info["eos_token"]
    for path in ("/stats", "/step_log", "/request_log", "/tokenizer_info"):
        assert httpx.get(server.url + path, timeout=10).status_code == 401
    metrics = httpx.get(server.url + "/metrics", timeout=10).text  # open, for Prometheus
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "minillm:kv_cache_usage_blocks",
        "vllm:prefix_cache_hits_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:num_preemptions_total",
    ):
        assert any(line.startswith(name + "{") for line in metrics.splitlines()), (
            name
        )  # a sample, not only HELP
    gen = next(
        line for line in metrics.splitlines() if line.startswith("vllm:generation_tokens_total")
    )
    assert float(gen.split()[-1]) > 0


def test_errors_name_the_field_without_pydantic_words(server):
    r = httpx.post(
        server.url + "/v1/completions",
        content=b'{"prompt": "hi", "max_tokens": }',
        headers=dict(AUTH, **{"content-type": "application/json"}),
        timeout=10,
    )
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] is None and "not valid JSON" in err["message"]
    err = post(server, "/v1/completions", {"prompt": "hi", "temperature": "hot"}, 400)["error"]
    assert (
        err["message"] == "temperature is 'hot': expected a number"
        and err["param"] == "temperature"
    )
    err = post(
        server,
        "/v1/completions",
        {"prompt": "hi", "suffix": "and so on"},
        400,
    )["error"]
    assert "not supported by this server" in err["message"] and err["param"] == "suffix"
    err = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 0}, 400)["error"]
    assert err["param"] == "max_tokens"
    for e in (err,):
        assert "Input should" not in e["message"] and "pydantic" not in e["message"]
