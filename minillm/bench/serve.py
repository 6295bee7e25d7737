"""bench/serve.py — load-test an OpenAI-compatible server the way `vllm bench serve` does.

    python -m minillm bench-serve                          # launches a server on the bench
    model, then stops it python -m minillm bench-serve --base-url http://127.0.0.1:8000/v1
    --model PATH python -m minillm bench-serve --request-rate 2,4,8,inf --num-prompts 64    # a
    sweep

Each request is a prompt of `--random-input-len` seeded random token ids asking for exactly
`--random-output-len` tokens (EOS ignored), streamed through the official `openai` client.
Arrivals are open-loop: a Poisson process at `--request-rate` requests/s (inf: all at once),
never more than `--max-concurrency` in flight, and the generator never waits for answers before
sending the next request, as a real crowd of clients would not. Per request we time every
streamed chunk: TTFT (first token), TPOT ((last - first) / (tokens - 1)) and ITL (every gap
between tokens).

The same workload also runs through the offline engine in this process (`LLMEngine.generate`,
all requests queued, at most `--max-concurrency` running), its rounds alternating with the
server's rounds of the first rate (the server sits idle meanwhile), so the cost of the HTTP
layer is measured round by round: each server round's output throughput and step times next to
the offline round that ran right after it, with the CPU seconds each side used (this process's
and, for a launched server, its event loop's and its other threads'). The saved file keeps every
round of both sides.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from minillm.bench.server_process import (
    LaunchedServer,
)  # bench-serve launches its server with it


@dataclass
class RequestResult:
    ok: bool
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    error: str = ""
    request_id: str = ""  # the response's id: the engine's id of the request (n = 1)
    sent: float = 0.0  # perf_counter when the request was sent (its task began it)
    posted: float = 0.0  # perf_counter when the openai client handed it to the HTTP transport
    first_bytes: float = 0.0  # perf_counter when its first body bytes came out of the socket


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation, as numpy's default."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def make_prompts(num: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(input_len)] for _ in range(num)]


# the running request's clock readings: each request runs in a task of its own, so the
# transport below, called from that task, notes them in that request's dict
_clock: contextvars.ContextVar[dict | None] = contextvars.ContextVar("clock", default=None)


def timed_http_client():
    """An httpx client for the openai client whose transport notes, for the running request,
    when the request reached it ("posted") and when the response body's first bytes came out
    of the socket, before any parsing ("first_bytes")."""
    import httpx

    class Timed(httpx.AsyncByteStream):
        def __init__(self, stream, clock):
            self.stream, self.clock = stream, clock

        async def __aiter__(self):
            async for piece in self.stream:
                self.clock.setdefault("first_bytes", time.perf_counter())
                yield piece

        async def aclose(self):
            await self.stream.aclose()

    class Transport(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request):
            clock = _clock.get()
            if clock is not None:
                clock["posted"] = time.perf_counter()
            response = await super().handle_async_request(request)
            if clock is not None:
                response.stream = Timed(response.stream, clock)
            return response

    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)  # openai's
    return httpx.AsyncClient(transport=Transport(limits=limits), timeout=600)


async def one_request(client, model: str, prompt: list[int], max_tokens: int) -> RequestResult:
    start = time.perf_counter()
    times, n, rid = [], 0, ""
    clock: dict[str, float] = {}
    _clock.set(clock)
    try:
        stream = await client.completions.create(
            model=model,
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0.0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "return_token_ids": True},
        )
        async for chunk in stream:
            rid = chunk.id
            if chunk.choices:
                got = len(getattr(chunk.choices[0], "token_ids", None) or [])
                if got:
                    times.append(time.perf_counter())
                    n += got
            elif chunk.usage is not None:
                n = chunk.usage.completion_tokens
    except Exception as e:  # noqa: BLE001 - a failed request is counted and reported, not fatal
        return RequestResult(False, error=f"{type(e).__name__}: {e}")
    if not times:
        return RequestResult(False, error="no tokens came back")
    gaps = [b - a for a, b in zip(times, times[1:])]
    posted, first_bytes = clock.get("posted", 0.0), clock.get("first_bytes", 0.0)
    return RequestResult(
        True, times[0] - start, times[-1] - start, gaps, n, "", rid, start, posted, first_bytes
    )


async def run_load(
    base_url: str,
    model: str,
    prompts,
    max_tokens: int,
    rate: float,
    max_concurrency: int,
    seed: int,
    api_key: str | None,
    progress: bool = True,
    warmup: bool = True,
    exact_rate: bool = False,
) -> tuple[list[RequestResult], float]:
    """Send every prompt (Poisson arrivals at `rate`, at most max_concurrency in flight);
    (results, seconds). With `exact_rate`, the seeded gaps are rescaled to sum to
    (len(prompts) - 1) / rate, so the arrivals' realised rate is `rate` itself."""
    import openai
    from tqdm.auto import tqdm

    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key=api_key or "none",
        max_retries=0,
        timeout=600,
        http_client=timed_http_client(),
    )
    rng = random.Random(seed)
    gate = asyncio.Semaphore(max_concurrency)
    bar = tqdm(
        total=len(prompts), desc=f"rate {rate:g} req/s", unit="req", disable=not progress
    )

    async def limited(p):
        async with gate:
            r = await one_request(client, model, p, max_tokens)
        bar.update(1)
        return r

    if (
        warmup
    ):  # one unmeasured round of the same shapes: first calls of torch kernels are slow on CPU
        warm = asyncio.Semaphore(max_concurrency)

        async def unmeasured(p):
            async with warm:
                return await one_request(client, model, p, max_tokens)

        await asyncio.gather(*(unmeasured(p) for p in prompts[: 2 * max_concurrency]))
    # the gap after each arrival but the last: the run ends on the last answer
    gaps = [rng.expovariate(rate) for _ in prompts[1:]] if math.isfinite(rate) else []
    if exact_rate and sum(gaps) > 0:
        scale = len(gaps) / rate / sum(gaps)
        gaps = [g * scale for g in gaps]
    start = time.perf_counter()
    tasks = []
    for i, p in enumerate(prompts):
        tasks.append(asyncio.create_task(limited(p)))
        if i < len(gaps):
            await asyncio.sleep(gaps[i])
    results = await asyncio.gather(*tasks)
    seconds = time.perf_counter() - start
    bar.close()
    await client.close()
    return list(results), seconds


def steady_throughput(results: list[RequestResult], first: int = 4, last: int = 20) -> float:
    """Requests completed per second between the `first`-th and the `last`-th completion: the
    rate once the run has filled and before it drains (a whole run's count over its duration
    also counts the start, when nothing can finish, and the drain after the last arrival)."""
    ends = sorted(r.sent + r.latency for r in results if r.ok)
    if len(ends) < last or ends[last - 1] <= ends[first - 1]:
        return float("nan")
    return (last - first) / (ends[last - 1] - ends[first - 1])


def summarize(results: list[RequestResult], seconds: float, input_len: int) -> dict:
    ok = [r for r in results if r.ok]
    out = sum(r.output_tokens for r in ok)
    ttft = [r.ttft * 1e3 for r in ok]
    tpot = [
        (r.latency - r.ttft) / (r.output_tokens - 1) * 1e3 for r in ok if r.output_tokens > 1
    ]
    itl = [x * 1e3 for r in ok for x in r.itl]
    row = {
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "duration_s": seconds,
        "request_throughput": len(ok) / seconds,
        "output_throughput": out / seconds,
        "total_token_throughput": (out + input_len * len(ok)) / seconds,
    }
    for name, xs in (("ttft_ms", ttft), ("tpot_ms", tpot), ("itl_ms", itl)):
        row[name] = {
            "mean": statistics.fmean(xs) if xs else float("nan"),
            "p50": percentile(xs, 50),
            "p90": percentile(xs, 90),
            "p99": percentile(xs, 99),
        }
    row["errors"] = sorted({r.error for r in results if not r.ok})[:3]
    return row


def print_summary(rate: float, concurrency: int, row: dict, offline: dict | None) -> None:
    line = "=" * 56
    print(
        f"{line}\n serving benchmark: request rate {rate:g} req/s, max concurrency "
        f"{concurrency}\n{line}"
    )
    print(f"{'successful requests:':<36}{row['completed']:>12}")
    if row["failed"]:
        print(f"{'failed requests:':<36}{row['failed']:>12}  {row['errors']}")
    print(f"{'benchmark duration (s):':<36}{row['duration_s']:>12.2f}")
    print(f"{'request throughput (req/s):':<36}{row['request_throughput']:>12.2f}")
    print(f"{'output token throughput (tok/s):':<36}{row['output_throughput']:>12.1f}")
    if offline is not None:
        print(
            f"{'  offline engine, same workload:':<36}{offline['output_throughput']:>12.1f}   "
            "(server / offline = "
            f"{row['output_throughput'] / offline['output_throughput']:.2f})"
        )
    if "engine_steps" in row:
        print(
            f"{'engine steps, median step (ms):':<36}{row['engine_steps']:>12}"
            f"{row['engine_step_ms_p50']:>9.1f}"
            f"   (busy {row['engine_busy']:.0%} of the run)"
        )
        if offline is not None:
            print(
                f"{'  offline engine:':<36}{offline['engine_steps']:>12}"
                f"{offline['engine_step_ms_p50']:>9.1f}"
            )
    print(f"{'total token throughput (tok/s):':<36}{row['total_token_throughput']:>12.1f}")
    for name, title in (
        ("ttft_ms", "time to first token"),
        ("tpot_ms", "time per output token"),
        ("itl_ms", "inter-token latency"),
    ):
        m = row[name]
        print(f"{'-' * 18} {title} (ms) {'-' * (32 - len(title))}")
        print("   " + "   ".join(f"{k} {m[k]:8.2f}" for k in ("mean", "p50", "p90", "p99")))
    print(line)


def in_a_thread(fn, *args):
    """fn(*args) run in a new thread, as the server runs its engine: the two then differ only in
    the HTTP layer.

    It matters on a loaded machine: with more runnable threads than cores, torch's OpenMP
    work called from a process's main thread was measured several times slower per step than
    the same work from another thread (1.9 s against 0.26 s for a decode step of 8 on the
    bench model, 2 shared cores, load 10)."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, name="minillm-offline")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def make_offline_engine(model_path: Path, prompts, max_tokens: int, max_num_seqs: int):
    """The offline engine the server's numbers are compared with, configured and warmed up like
    the server's."""
    from minillm.engine import LLMEngine
    from minillm.sampling import SamplingParams

    engine = LLMEngine(model_path, max_num_seqs=max_num_seqs, max_num_batched_tokens=512)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    in_a_thread(lambda: engine.generate(prompts[: 2 * max_num_seqs], params, progress=False))
    return engine


def run_offline(engine, prompts, max_tokens: int) -> tuple[float, list[float]]:
    """(output tokens/s, each step's seconds) of the engine on the same prompts, all queued at
    once, in
    an engine thread; the same loop as `generate`, with each step timed."""
    from minillm.sampling import SamplingParams

    def timed():
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        start = time.perf_counter()
        for p in prompts:
            engine.add_request(p, params)
        steps, produced = [], 0
        while engine.has_unfinished():
            t = time.perf_counter()
            produced += len(engine.step())
            steps.append(time.perf_counter() - t)
        return produced / (time.perf_counter() - start), steps

    return in_a_thread(timed)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) a process has used so far: (its main thread, all its other
    threads, ended ones included), from Linux's /proc. For a server: (the event loop, which
    uvicorn runs in the main thread; the engine thread, torch's workers and the tokenizer's)."""

    def used(stat_path: str) -> float:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "(name)": the state first
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    main = used(f"/proc/{pid}/task/{pid}/stat")
    return main, used(f"/proc/{pid}/stat") - main  # the process's stat counts every thread


def server_steps(root_url: str, since: int, api_key: str | None = None) -> list[float]:
    """The seconds of every step the server ran after step `since` (from its /step_log)."""
    import httpx

    log = httpx.get(root_url + "/step_log", params={"last": 100_000}, timeout=30).json()[
        "steps"
    ]
    return [s["seconds"] for s in log if s["step"] > since]


def num_server_steps(root_url: str) -> int:
    import httpx

    return httpx.get(root_url + "/stats", timeout=30).json()["num_steps"]


def main(args) -> int:
    from minillm.bench.common import load_average
    from minillm.model import ModelConfig, read_config

    load_before = load_average()  # before this command's own load: what else was running
    model = args.model
    if model is None:
        from minillm.bench.common import bench_model_path

        model = bench_model_path()
    name = args.served_model_name or Path(model).name
    vocab = ModelConfig.from_hf(read_config(model)).vocab_size
    prompts = make_prompts(args.num_prompts, args.random_input_len, vocab, args.seed)
    server = None
    if args.base_url is None:
        server = LaunchedServer(
            model, max_num_seqs=args.max_concurrency, api_key=args.api_key
        ).wait_ready()
        base = server.url + "/v1"
        print(f"launched `python -m minillm serve --model {model}` on {server.url}")
    else:
        base = args.base_url
    rows, offline_runs, offline = [], [], None
    try:
        engine = (
            make_offline_engine(
                Path(model), prompts, args.random_output_len, args.max_concurrency
            )
            if args.offline
            else None
        )
        root = base[:-3] if base.endswith("/v1") else base
        for i, rate in enumerate(args.request_rate):
            runs = []
            for r in range(args.repeats):
                if (
                    i == 0 and r == 0
                ):  # one unmeasured round first, for the server's first-call costs
                    asyncio.run(
                        run_load(
                            base,
                            name,
                            prompts[: 2 * args.max_concurrency],
                            args.random_output_len,
                            math.inf,
                            args.max_concurrency,
                            args.seed,
                            args.api_key,
                            progress=False,
                            warmup=False,
                        )
                    )
                since = num_server_steps(root)
                # CPU seconds of this process (the load generator) and of the server's threads
                client0 = time.process_time()
                server0 = cpu_seconds(server.proc.pid) if server is not None else None
                results, seconds = asyncio.run(
                    run_load(
                        base,
                        name,
                        prompts,
                        args.random_output_len,
                        rate,
                        args.max_concurrency,
                        args.seed,
                        args.api_key,
                        warmup=False,
                    )
                )
                client_cpu = time.process_time() - client0
                server1 = cpu_seconds(server.proc.pid) if server is not None else None
                steps = server_steps(root, since)
                runs.append(
                    {
                        "request_rate": rate,
                        **summarize(results, seconds, args.random_input_len),
                        "engine_steps": len(steps),
                        "engine_step_ms_p50": percentile(steps, 50) * 1e3,
                        "engine_step_ms_mean": statistics.fmean(steps) * 1e3 if steps else 0.0,
                        "engine_busy": sum(steps) / seconds,
                        "client_cpu_s": client_cpu,
                    }
                )
                if server0 is not None:  # launched here, so its threads can be read
                    loop, rest = (b - a for a, b in zip(server0, server1))
                    runs[-1].update(server_loop_cpu_s=loop, server_engine_cpu_s=rest)
                if (
                    engine is not None and i == 0
                ):  # alternate with the server's rounds: drift hits both alike
                    cpu0 = time.process_time()
                    tps, off_steps = run_offline(engine, prompts, args.random_output_len)
                    offline_runs.append(
                        {
                            "cpu_s": time.process_time() - cpu0,  # the engine and its workers
                            "output_throughput": tps,
                            "engine_steps": len(off_steps),
                            "engine_step_ms_p50": percentile(off_steps, 50) * 1e3,
                            "engine_step_ms_mean": statistics.fmean(off_steps) * 1e3,
                        }
                    )
            median = sorted(runs, key=lambda row: row["output_throughput"])[len(runs) // 2]
            # every round too, in the order run: round k of the first rate ran just before
            # offline round k, so the two can be compared pairwise
            rows.append({**median, "rounds": runs})
    finally:
        if server is not None:
            server.stop()
    if offline_runs:
        offline = sorted(offline_runs, key=lambda o: o["output_throughput"])[
            len(offline_runs) // 2
        ]
    for i, row in enumerate(
        rows
    ):  # the offline engine ran next to the first rate's rounds only
        print_summary(
            row["request_rate"], args.max_concurrency, row, offline if i == 0 else None
        )
    if args.save:
        info = {
            "model": str(model),
            "num_prompts": args.num_prompts,
            "input_len": args.random_input_len,
            "output_len": args.random_output_len,
            "max_concurrency": args.max_concurrency,
            "offline": offline,
            "offline_rounds": offline_runs,
            "repeats": args.repeats,
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,  # 1-minute load averages
            "load_average_after": load_average(),
        }
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(
            json.dumps({"workload": info, "runs": rows}, indent=1, default=str)
        )
    return 0 if all(r["failed"] == 0 for r in rows) else 1
