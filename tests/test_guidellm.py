"""guidellm (vLLM's load generator) against `python -m minillm serve`, with its default request
format (streamed chat completions, content as text parts, `stream_options` with
`continuous_usage_stats`, `ignore_eos`): four requests, two at a time, on a loopback port; it
stops by itself after the fourth. guidellm runs from its own folder (serving/guidellm_env.py).
"""

from __future__ import annotations

import re

import httpx
import pytest

from minillm.bench.server_process import LaunchedServer
from minillm.serving.guidellm_env import run_guidellm


@pytest.mark.slow
def test_guidellm_default_run_completes_every_request(tiny_default_path, tmp_path):
    server = LaunchedServer(tiny_default_path)
    try:
        server.wait_ready(timeout=300)
        report = run_guidellm(
            server.url, tiny_default_path, tmp_path / "r.json", num_requests=4, output_tokens=16
        )
        scraped = httpx.get(server.url + "/metrics", timeout=30).text
        log = server.output()
    finally:
        server.stop()
    (bench,) = report["benchmarks"]
    assert bench["scheduler_metrics"]["requests_made"] == {
        "successful": 4,
        "errored": 0,
        "incomplete": 0,
        "total": 4,
    }
    done = bench["requests"]["successful"]
    assert len(done) == 4
    # ignore_eos and max_tokens were honoured: every answer is exactly 16 tokens, by the
    # server's own usage counts
    assert [r["output_metrics"]["text_tokens"] for r in done] == [16] * 4
    # the server saw the same four requests finish by length
    finished = re.search(
        r'^vllm:request_success_total\{[^}]*finished_reason="length"[^}]*\} (\S+)',
        scraped,
        re.M,
    )
    assert finished and float(finished.group(1)) == 4.0, scraped[:2000]
    assert "Traceback" not in log
