"""Clients nobody here wrote, against the server: LangChain's ChatOpenAI (invoke, stream, batch,
no
max_tokens), and guidellm's default request (chat content as text parts, streamed with
stream_options.continuous_usage_stats), sent as guidellm sends it."""

from __future__ import annotations

import json

import httpx
import pytest

from minillm.bench.server_process import LaunchedServer

MAX_LEN = 96  # chat without max_tokens runs to the end of this context


@pytest.fixture(scope="module")
def server(tiny_default_path):
    srv = LaunchedServer(tiny_default_path, extra=["--max-model-len", str(MAX_LEN)])
    try:
        yield srv.wait_ready(timeout=300)
    finally:
        srv.stop()


def test_langchain_chat_openai_invoke_stream_and_batch_without_max_tokens(
    server, tiny_default_path
):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=tiny_default_path.name,
        base_url=server.url + "/v1",
        api_key="none",
        temperature=0,
        max_retries=0,
        timeout=120,
    )
    one = llm.invoke("Say hi")
    usage = one.response_metadata["token_usage"]
    # not cut at the engine's default of 16 tokens: the rest of the context (random weights
    # never say EOS)
    assert (
        usage["completion_tokens"] > 16
        and usage["prompt_tokens"] + usage["completion_tokens"] == MAX_LEN
    )
    streamed = "".join(chunk.content for chunk in llm.stream("Say hi"))
    assert streamed == one.content
    both = llm.batch(["Say hi", "Say bye"])
    assert both[0].content == one.content and len(both) == 2


def test_guidellm_default_request_shape(server, tiny_default_path):
    body = {
        "model": tiny_default_path.name,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a b c d e f g"}]}],
        "max_tokens": 12,
        "max_completion_tokens": 12,
        "ignore_eos": True,
    }
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 12 and chunks[-1]["choices"] == []
    counts = [c["usage"]["completion_tokens"] for c in chunks[1:-1] if c["usage"]]
    assert counts == sorted(counts) and counts[-1] == 12  # usage so far on every chunk
