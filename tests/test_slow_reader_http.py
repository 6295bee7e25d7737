"""Over HTTP: a client that stays connected but stops reading is cut off by --max-unread-tokens
once the socket buffers between it and the server are full, and the request log times each
request from the moment the server received it."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from minillm.bench.server_process import LaunchedServer

MAX_TOKENS = 4000  # near the default model's context of 4096


@pytest.fixture(scope="module")
def tight(tiny_default_path):
    srv = LaunchedServer(tiny_default_path, extra=["--max-unread-tokens", "8"])
    try:
        yield srv.wait_ready(timeout=180)
    finally:
        srv.stop()


def finished(server) -> dict[str, float]:
    """vllm:request_success_total by finished_reason, from /metrics."""
    out = {}
    for line in httpx.get(server.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            reason = line.split('finished_reason="')[1].split('"')[0]
            out[reason] = float(line.split()[-1])
    return out


def test_a_client_that_stops_reading_is_aborted_and_its_blocks_freed(tight, tiny_default_path):
    before = finished(tight)
    body = {
        "model": tiny_default_path.name,
        "messages": [{"role": "user", "content": "Tell me everything."}],
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "ignore_eos": True,
        "return_token_ids": True,
        # about 2 KiB a chunk, so the whole stream (8 MiB) is more than Linux's largest send
        # buffer by default (tcp_wmem's 4 MiB) and the buffers fill long before max_tokens
        "logprobs": True,
        "top_logprobs": 20,
    }
    payload = json.dumps(body).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: no autotuning
    sock.settimeout(60)
    sock.connect(("127.0.0.1", tight.port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
    )
    raw = sock.recv(256)  # the response has begun: the request is in the engine
    deadline = time.monotonic() + 120
    while httpx.get(tight.url + "/stats", timeout=10).json()["num_requests"]:
        assert time.monotonic() < deadline, "the engine never let go of the request"
        time.sleep(0.05)
    while piece := sock.recv(1 << 16):  # only now read the rest
        raw += piece
    sock.close()
    events = [x[6:] for x in raw.decode().split("\n") if x.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(x) for x in events[:-1]]
    tokens = sum(
        len(c["choices"][0].get("token_ids", [])) for c in chunks
    )  # [] in the role chunk
    assert chunks[-1]["choices"][0]["finish_reason"] == "abort"
    assert 8 < tokens < MAX_TOKENS  # more than the bound, cut off long before max_tokens
    after = finished(tight)
    assert after.get("abort", 0) == before.get("abort", 0) + 1
    stats = httpx.get(tight.url + "/stats", timeout=10).json()
    assert stats["num_free_blocks"] == stats["num_blocks"]


def test_the_request_log_starts_when_the_server_receives_the_request(tight, tiny_default_path):
    r = httpx.post(
        tight.url + "/v1/completions",
        json={"model": tiny_default_path.name, "prompt": "Hello there", "max_tokens": 2},
        timeout=60,
    )
    rid = r.json()["id"]
    log = httpx.get(tight.url + "/request_log", timeout=10).json()["requests"]
    (e,) = [x for x in log if x["request_id"] == rid]
    # received by the middleware, before the body was read and the prompt tokenized
    assert 0 <= e["received"] < e["submitted"] <= e["taken"] <= e["scheduled"]
    assert e["scheduled"] < e["first_token"]


def test_server_and_client_times_of_a_first_token_lie_in_order_on_one_clock(
    tight, tiny_default_path
):
    import asyncio

    from minillm.bench.serve import run_load

    prompts = [[1000 + i, 2000 + i, 3000 + i] for i in range(3)]
    results, _ = asyncio.run(
        run_load(
            tight.url + "/v1",
            tiny_default_path.name,
            prompts,
            4,
            float("inf"),
            3,
            0,
            None,
            progress=False,
            warmup=False,
        )
    )
    log = httpx.get(tight.url + "/request_log", timeout=10).json()
    by_id = {e["request_id"]: e for e in log["requests"]}
    TIMES = ("received", "submitted", "taken", "scheduled", "first_token", "handed", "read")
    TIMES += ("written",)  # the server's times of a request that was not aborted
    for x in results:
        assert x.ok, x.error
        e = {k: v + log["started"] for k, v in by_id[x.request_id].items() if k in TIMES}
        chain = [x.sent, x.posted, e["received"], e["submitted"], e["taken"], e["scheduled"]]
        chain += [e["first_token"], e["handed"], e["read"], e["written"], x.first_bytes]
        chain += [x.sent + x.ttft]  # the client has parsed the first token
        assert chain == sorted(chain), chain


def test_a_hang_up_logs_when_its_abort_was_queued_and_applied(tight, tiny_default_path):
    body = {
        "model": tiny_default_path.name,
        "prompt": "Tell me everything.",
        "max_tokens": 2000,
        "stream": True,
        "ignore_eos": True,
    }
    with httpx.stream("POST", tight.url + "/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()  # kept: a dropped line iterator would close the response now
        first = next(lines)  # data: {chunk}: the request is running
        closed = time.perf_counter()  # the response closes as the block ends
    rid = json.loads(first[6:])["id"]
    deadline = time.monotonic() + 60
    while True:
        log = httpx.get(tight.url + "/request_log", timeout=10).json()
        (e,) = [x for x in log["requests"] if x["request_id"] == rid]
        if e["aborted"] is not None:
            break
        assert time.monotonic() < deadline, "the abort was never applied"
        time.sleep(0.05)
    assert closed < log["started"] + e["abort_queued"] <= log["started"] + e["aborted"]
