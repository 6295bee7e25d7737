"""serve_sweep.py — chapter 8's latency sweep: open-loop runs against a live server, and what
the server records about each run beside the clients' own timings.

`sweep` runs every rate once per arrival seed against one server. Each run is a dict: the
clients' summary (`summarize`), the engine's running and waiting counts (GET /stats every
50 ms), the steps of 4 decodes (GET /step_log), each request's TTFT in parts (GET /request_log,
on the client's clock) and the CPU seconds of the load generator and of the server's two sides.
`show` prints a table of min-max cells over the seeds' runs at each rate.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from minillm.bench.serve import cpu_seconds, run_load, steady_throughput, summarize

# the request log's times of one request, in the order they happen (seconds on the log's axis)
TIMES = (
    "received",
    "submitted",
    "taken",
    "scheduled",
    "first_token",
    "handed",
    "read",
    "written",
)
# ttft_parts_ms's columns: the five parts of a TTFT, then HTTP+client in seven, then one span
FIVE = ["handler", "step end", "a place", "prefill step", "HTTP+client"]
SEVEN = [
    "client prep",
    "way in",
    "hand-over",
    "loop wait",
    "write",
    "client read",
    "client parse",
]
TO_SUBMIT = 12  # the column of the span from the client's send to the server's `submit`


async def sample_engine(url: str, stop: asyncio.Event, samples: list) -> None:
    """Append (running, waiting) from GET /stats every 50 ms until `stop` is set."""
    async with httpx.AsyncClient(timeout=10) as c:
        while not stop.is_set():
            s = (await c.get(url + "/stats")).json()
            samples.append((s["num_running"], s["num_waiting"]))
            await asyncio.sleep(0.05)


def full_steps_ms(url: str, since: int) -> list[tuple[float, float]]:
    """(step, gap to the next step) in ms, of each step after step `since` that ran 4 decodes
    and nothing else: the same work at every rate."""
    log = httpx.get(url + "/step_log", params={"last": 2000}).json()["steps"]
    steps = [s for s in log if s["step"] > since]
    return [
        (a["seconds"] * 1e3, (b["time"] - a["time"] - a["seconds"]) * 1e3)
        for a, b in zip(steps, steps[1:])
        if len(a["chunks"]) == 4 and all(c["kind"] == "decode" for c in a["chunks"])
    ]


def step_interval_ms(url: str, since: int) -> float:
    """The mean time from one step's start to the next's, ms, over the steps after `since`."""
    log = httpx.get(url + "/step_log", params={"last": 2000}).json()["steps"]
    times = [s["time"] for s in log if s["step"] > since]
    return (times[-1] - times[0]) / (len(times) - 1) * 1e3 if len(times) > 1 else float("nan")


def ttft_parts_ms(url: str, results) -> list[list[float]]:
    """Each request's TTFT in parts, ms, one row per request: FIVE (they sum to the TTFT), then
    SEVEN (they sum to HTTP+client), then the span from sending to `submit` (TO_SUBMIT). The
    server's times are put on the client's clock with the log's `started` (one clock: Linux's
    CLOCK_MONOTONIC in both processes)."""
    log = httpx.get(url + "/request_log", params={"last": 200}).json()
    by_id = {x["request_id"]: x for x in log["requests"]}
    rows = []
    for x in results:
        e = {k: v + log["started"] for k, v in by_id[x.request_id].items() if k in TIMES}
        row = [
            e["submitted"] - e["received"],  # handler: read and validate the body, tokenize
            e["taken"] - e["submitted"],  # step end: commands are taken between steps
            e["scheduled"] - e["taken"],  # a place: one of max_num_seqs
            e["first_token"] - e["scheduled"],  # the step that ran its prefill
            x.ttft - (e["first_token"] - e["received"]),  # HTTP+client: the rest
            x.posted - x.sent,  # client prep: the openai client's work before its transport
            e["received"] - x.posted,  # way in: transport to the server's middleware
            e["handed"] - e["first_token"],  # hand-over: detokenize, stop check, to the loop
            e["read"] - e["handed"],  # loop wait: until the handler takes the delta
            e["written"] - e["read"],  # write: the chunk's bytes handed to uvicorn
            x.first_bytes - e["written"],  # client read: until the bytes leave the socket
            x.sent + x.ttft - x.first_bytes,  # client parse: up to the token
            e["submitted"] - x.sent,  # sent to submitted: client prep + way in + handler
        ]
        rows.append([p * 1e3 for p in row])
    return rows


async def one_run(url, pid, model, prompts, max_tokens, rate, seed) -> dict:
    """One open-loop run of `prompts` at `rate` (arrival gaps drawn with `seed`, rescaled to
    sum to (len - 1) / rate), and what the server recorded meanwhile."""
    stop, samples = asyncio.Event(), []
    sampler = asyncio.create_task(sample_engine(url, stop, samples))
    since = httpx.get(url + "/stats").json()["num_steps"]
    client0, server0 = time.process_time(), cpu_seconds(pid)
    results, seconds = await run_load(
        url + "/v1",
        model,
        prompts,
        max_tokens,
        rate,
        len(prompts),  # never limited by the client: open loop
        seed,
        api_key=None,
        progress=False,
        warmup=False,
        exact_rate=True,
    )
    stop.set()
    await sampler
    client = time.process_time() - client0  # this process: the load and the poller
    loop, engine = (b - a for a, b in zip(server0, cpu_seconds(pid)))
    r = {"rate": rate, "seed": seed, **summarize(results, seconds, len(prompts[0]))}
    r["ttfts"] = [x.ttft for x in results if x.ok]
    r["steady"] = steady_throughput(results)  # between the 4th and 20th completion
    r["parts"] = ttft_parts_ms(url, results)
    r["W_ms"] = sum(x.latency for x in results) / len(results) * 1e3  # mean latency
    r["running"] = sum(run for run, _ in samples) / len(samples)  # time averages
    r["waiting"] = sum(wait for _, wait in samples) / len(samples)
    r["full_ms"] = full_steps_ms(url, since)
    r["interval_ms"] = step_interval_ms(url, since)
    r["cores"] = [x / seconds for x in (client, loop, engine)]  # CPU s per second
    return r


async def sweep(url, pid, model, prompts, max_tokens, rates, seeds) -> list[dict]:
    """Every rate for every seed, seed by seed, so that drift over time touches every rate
    alike: one dict per run (`one_run`)."""
    return [
        await one_run(url, pid, model, prompts, max_tokens, rate, seed)
        for seed in seeds
        for rate in rates
    ]


def median(xs):
    """The middle value (the upper one of an even count); nan for none."""
    return sorted(xs)[len(xs) // 2] if xs else float("nan")


def lo_hi(runs, get, f="{:.0f}") -> str:
    """min-max of get(run) over `runs` ("-" where no run has a value; nan counts as none)."""
    xs = [x for x in map(get, runs) if x == x]
    return f"{f.format(min(xs))}-{f.format(max(xs))}" if xs else "-"


def show(title, cols, by_rate: dict) -> None:
    """One table: a row per rate, a column per (name, value of a run, format), min-max cells."""
    print(f"\n{title}")
    print("rate   " + "".join(f"{c:>14}" for c, _, _ in cols))
    for rate, runs in by_rate.items():
        cells = "".join(f"{lo_hi(runs, get, f):>14}" for _, get, f in cols)
        print(f"{'burst' if rate == float('inf') else f'{rate:4.0f}':5}  " + cells)
