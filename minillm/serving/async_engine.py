"""serving/async_engine.py — the engine behind a web server: one thread steps it, every request
reads a queue.

    front = AsyncEngine(engine)                         # starts the engine thread
    stream = await front.submit(prompt_ids, params, stop=["\\n"])
    async for delta in stream:                          # RequestDelta: text, token ids,
    finish_reason
        print(delta.text, end="")
    front.shutdown()

The engine is plain synchronous Python and not thread-safe, so exactly one thread touches it:
the engine thread. HTTP handlers run on the asyncio event loop and talk to it through a command
queue (add a request, abort one); the thread drains the commands between steps, runs
`engine.step()` whenever anything is unfinished, and sleeps on the queue when nothing is.
Requests that arrive from different HTTP clients while others are running simply join the next
step: that is continuous batching across clients, with no extra code, because the scheduler
never cared where requests came from.

After each step the thread turns each request's new tokens into text (the incremental
detokenizer: whole characters only), passes it through the request's stop-string matcher (hold
back what could still be a stop string), and hands the result to the request's asyncio queue
with `loop.call_soon_threadsafe`. A stop string ends the request in the engine at once
(abort_request), so its blocks are freed and it costs no more steps. A client that goes away
calls `abort`.

A reader that stays connected but reads slowly gets a bound instead: the engine thread counts
the deltas it has sent each request and the stream counts those its reader took; when a reader
falls `max_unread_tokens` behind, the request is aborted in the engine (its blocks freed), and
its stream ends, after what is already queued, with a delta whose finish_reason is "abort".
Generation is never paused for one reader: a paused request would hold its KV blocks for as
long as its reader dawdles. (vLLM neither pauses nor aborts: its RequestOutputCollector, in
vllm/v1/engine/output_processor.py of vLLM 0.34.0, merges the outputs a slow reader has not
taken into one, so what waits is bounded only by max_tokens.)

`step_log` keeps the last steps' plans (which requests ran together, how many tokens each), so
the batching across clients can be seen; vLLM's equivalents are its scheduler stats and
iteration logs. `request_log` keeps, per request, when the server received it, when it was
submitted, taken off the command queue, first scheduled and given its first token, so a TTFT can
be split into the handler's work before `submit` (reading the body, tokenizing), waiting for the
running step to end, waiting for a place, and the step that ran its prefill; then the first
delta's way out (handed to the event loop, taken by the handler, its bytes written: the server
sets `written`), and, for a request its client abandons, when the abort was queued and applied.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass

import torch

from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams
from minillm.serving.detokenizer import IncrementalDetokenizer
from minillm.serving.stop_strings import StopStringMatcher


@dataclass
class RequestDelta:
    """What one step produced for one request; finish_reason is set on its last delta."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0  # so far
    error: str | None = None  # the engine refused the request (set on the only delta it gets)
    logprobs: list | None = (
        None  # per token of token_ids: (logprob, [(id, logprob)]), if asked for
    )
    prompt_logprobs: list | None = (
        None  # on the first delta, if asked for (see Output.prompt_logprobs)
    )


@dataclass
class StepRecord:
    """One engine step as the step log shows it."""

    step: int
    time: float  # seconds since the engine thread started
    chunks: list[
        tuple[str, str, int]
    ]  # (request_id, kind, num_new_tokens) for each scheduled chunk
    seconds: float  # wall time of the step


@dataclass
class RequestTimes:
    """Where one request's time to first token went, in seconds since the engine thread
    started."""

    request_id: str
    received: float  # the server began handling it (`submit`'s caller says; else = submitted)
    submitted: float  # `submit` queued its add command (on the event loop)
    taken: float  # the engine thread took the command, between two steps
    scheduled: float  # the start of the first step that ran a chunk of it
    first_token: float  # the end of the step that gave its first token
    handed: float | None = None  # the engine thread handed the first delta to the event loop
    read: float | None = None  # the handler took it from the request's queue
    written: float | None = None  # the response's first bytes went to uvicorn (server.py)
    abort_queued: float | None = None  # RequestStream.abort put the abort on the command queue
    aborted: float | None = None  # the engine thread applied that abort, between two steps


@dataclass
class _Request:
    """The engine thread's state of one request (the text side; the engine holds the token
    side)."""

    request_id: str
    num_prompt: int
    detok: IncrementalDetokenizer | None
    stopper: StopStringMatcher
    out: asyncio.Queue
    stream: RequestStream | None = None  # its reader's side: how many deltas it took
    stop_token_ids: frozenset[int] = frozenset()  # the tokens whose text is never shown
    num_sent: int = 0  # deltas handed to `out`
    num_output: int = 0
    done: bool = False
    arrival: float = 0.0  # perf_counter when the engine thread took it (for TTFT)
    submitted: float = 0.0  # perf_counter when `submit` queued it
    received: float = 0.0  # perf_counter when the server began handling it
    scheduled: float = 0.0  # perf_counter at the start of the first step that ran it
    last_token: float = 0.0
    first_token: float = 0.0


class RequestStream:
    """An async iterator over one request's deltas; `aclose`/`abort` tells the engine to stop
    it."""

    def __init__(self, front: AsyncEngine, request_id: str, out: asyncio.Queue):
        self.front, self.request_id, self.out = front, request_id, out
        self.finished = False
        self.num_read = 0  # deltas the reader took; the engine thread compares its own count
        self.times: RequestTimes | None = None  # set by the engine thread at the first token

    def __aiter__(self):
        return self

    async def __anext__(self) -> RequestDelta:
        if self.finished:
            raise StopAsyncIteration
        delta = await self.out.get()
        self.num_read += 1
        if self.num_read == 1 and self.times is not None:
            self.times.read = self.front.clock()
        if delta.finish_reason is not None or delta.error is not None:
            self.finished = True
        return delta

    def abort(self) -> None:
        if not self.finished:
            self.finished = True
            if self.times is not None:
                self.times.abort_queued = self.front.clock()
            self.front.abort(self.request_id)


class AsyncEngine:
    def __init__(
        self, engine: LLMEngine, step_log_size: int = 2000, max_unread_tokens: int = 1024
    ):
        if not isinstance(engine, LLMEngine):
            raise ValueError(f"engine is {engine!r}: expected an LLMEngine")
        if not (isinstance(max_unread_tokens, int) and max_unread_tokens >= 1):
            raise ValueError(
                f"max_unread_tokens is {max_unread_tokens!r}: expected an int >= 1"
            )
        self.max_unread_tokens = max_unread_tokens
        self.engine = engine
        engine.record_plans = (
            True  # the thread moves each plan into step_log and clears engine.plans
        )
        self.step_log: deque[StepRecord] = deque(maxlen=step_log_size)
        self.request_log: deque[RequestTimes] = deque(maxlen=step_log_size)
        self.num_steps = 0
        self.commands: queue.Queue = queue.Queue()
        self.requests: dict[str, _Request] = {}  # touched by the engine thread only
        self.error: BaseException | None = None  # an exception that stopped the engine thread
        self._stop = threading.Event()
        self.started = time.perf_counter()  # the logs' time 0 (perf_counter)
        self.metrics = (
            None  # a serving.metrics.ServerMetrics, called from the engine thread when set
        )
        self.torch_threads = (
            0  # torch's intra-op threads in the engine thread, set as it starts
        )
        self.thread = threading.Thread(target=self._run, name="minillm-engine", daemon=True)
        self.thread.start()

    # ---- called from the event loop
    #   ----------------------------------------------------------------
    async def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        stop=(),
        request_id: str = "",
        cache_salt: str | None = None,
        fork_of: str | None = None,
        received: float | None = None,
    ) -> RequestStream:
        """Queue a request; returns its stream at once. A refused request's stream yields one
        error delta.

        fork_of: an earlier request with the same prompt whose blocks this one shares (n >
        1). received: the perf_counter at which the server began handling it, for the request
        log (None: now)."""
        if self.error is not None or not self.thread.is_alive():
            raise RuntimeError(f"the engine thread has stopped: {self.error!r}")
        out: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        stopper = StopStringMatcher(stop)  # checked here, so a bad stop fails in the handler
        prompt = (
            {"prompt_token_ids": list(prompt_ids), "cache_salt": cache_salt}
            if cache_salt
            else list(prompt_ids)
        )
        stream = RequestStream(self, request_id, out)
        now = time.perf_counter()
        received = now if received is None else received
        self.commands.put(
            ("add", stream, prompt, params, stopper, loop, fork_of, (received, now))
        )
        return stream

    def abort(self, request_id: str) -> None:
        self.commands.put(("abort", request_id))

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.commands.put(("wake",))
        self.thread.join(timeout)

    def clock(self) -> float:
        """Now, in the request and step logs' seconds (since the engine thread started)."""
        return time.perf_counter() - self.started

    def stats(self) -> dict:
        """A snapshot for /stats (read without a lock: ints and lengths only, good enough for
        monitoring)."""
        sched = self.engine.scheduler
        return {
            "num_blocks": sched.pool.num_blocks,
            "num_free_blocks": sched.pool.num_free,
            "num_running": len(sched.running),
            "num_waiting": len(sched.waiting),
            "num_steps": self.num_steps,
            "num_requests": len(self.requests),
            "torch_threads": self.torch_threads,
        }

    # ---- the engine thread
    #   -------------------------------------------------------------------------
    def _run(self) -> None:
        self.torch_threads = torch.get_num_threads()  # what every step here runs with
        try:
            while not self._stop.is_set():
                block = not self.engine.has_unfinished()
                self._drain(block)
                if self.engine.has_unfinished():
                    self._step()
        except BaseException as e:  # noqa: BLE001 - reported to every waiting request, then kept for /health
            self.error = e
            for req in list(self.requests.values()):
                self._send(
                    req,
                    RequestDelta("", [], error=f"the engine failed: {type(e).__name__}: {e}"),
                )

    def _drain(self, block: bool) -> None:
        """Apply every queued command; wait for one first if the engine has nothing to do."""
        try:
            cmd = self.commands.get(timeout=0.5) if block else self.commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self._apply(cmd)
            try:
                cmd = self.commands.get_nowait()
            except queue.Empty:
                return

    def _apply(self, cmd) -> None:
        if cmd[0] == "add":
            _, stream, prompt, params, stopper, loop, fork_of, (received, submitted) = cmd
            rid, out = stream.request_id, stream.out
            tok = self.engine.tokenizer
            num_prompt = (
                len(prompt["prompt_token_ids"]) if isinstance(prompt, dict) else len(prompt)
            )
            req = _Request(
                rid,
                num_prompt,
                IncrementalDetokenizer(tok) if tok is not None else None,
                stopper,
                out,
                stream,
            )
            req.loop, req.arrival, req.submitted = loop, time.perf_counter(), submitted
            req.received = received
            req.stop_token_ids = self.engine.stop_token_ids(params)
            try:
                self.engine.add_request(prompt, params, request_id=rid, fork_of=fork_of)
            except (
                ValueError
            ) as e:  # the engine refuses it (too long for the pool, a repeated id): a 400
                self._send(req, RequestDelta("", [], error=str(e)))
                return
            self.requests[rid] = req
        elif cmd[0] == "abort":
            req = self.requests.pop(cmd[1], None)
            if req is not None:
                self.engine.abort_request(cmd[1])
                if req.stream.times is not None:
                    req.stream.times.aborted = self.clock()

    def _step(self) -> None:
        t = time.perf_counter()
        events = self.engine.step()
        plans, self.engine.plans = self.engine.plans, []
        self.num_steps += 1
        for plan in plans:
            for c in plan.chunks:
                req = self.requests.get(c.request_id)
                if req is not None and not req.scheduled:
                    req.scheduled = t  # the step that first ran it (its prefill) began at t
            if plan.chunks:
                self.step_log.append(
                    StepRecord(
                        self.num_steps,
                        t - self.started,
                        [(c.request_id, c.kind, c.num_new) for c in plan.chunks],
                        time.perf_counter() - t,
                    )
                )
        now = time.perf_counter()
        if self.metrics is not None:
            self.metrics.on_step(plans)
        for ev in events:
            req = self.requests.get(ev.request_id)
            if req is None:
                continue  # aborted while this step ran
            if self.metrics is not None:
                self.metrics.on_token(
                    now - (req.last_token if req.num_output else req.arrival),
                    req.num_output == 0,
                )
            req.num_output += 1
            req.last_token = now
            if req.num_output == 1:
                req.first_token = now
                req.stream.times = RequestTimes(
                    req.request_id,
                    *(x - self.started for x in (req.received, req.submitted, req.arrival)),
                    (req.scheduled or t) - self.started,
                    now - self.started,
                )
                self.request_log.append(req.stream.times)
            # a stop token (EOS, stop_token_ids) ends the text without showing its own, as in
            # vLLM, whose detokenizer leaves out the last token of a stop-terminated request
            # (a grammar that ends the request on an ordinary token keeps that token's text)
            stop_token = (
                ev.output is not None
                and ev.output.finish_reason == "stop"
                and ev.token_id in req.stop_token_ids
            )
            text = "" if req.detok is None or stop_token else req.detok.add(ev.token_id)
            finish = None
            if ev.output is not None:  # the engine finished it (EOS, a stop token, max_tokens)
                if req.detok is not None:
                    text += req.detok.flush()
                finish = ev.output.finish_reason
            text, stopped = req.stopper.add(text)
            if (
                stopped and finish is None
            ):  # a stop string: end it in the engine now, freeing its blocks
                self.engine.abort_request(ev.request_id)
            if stopped:
                finish = "stop"
            elif finish is not None:
                text += req.stopper.flush()
            if req.num_output == 1:
                # set before the hand-over, so it precedes the handler's `read`
                req.stream.times.handed = self.clock()
            self._send(
                req,
                RequestDelta(
                    text,
                    [ev.token_id],
                    finish,
                    req.num_prompt,
                    req.num_output,
                    logprobs=None if ev.logprobs is None else [ev.logprobs],
                    prompt_logprobs=ev.prompt_logprobs,
                ),
            )
            if finish is None and req.num_sent - req.stream.num_read > self.max_unread_tokens:
                # a reader this far behind: stop generating for it rather than buffer more
                self.engine.abort_request(ev.request_id)
                finish = "abort"
                self._send(req, RequestDelta("", [], finish, req.num_prompt, req.num_output))
            if finish is not None:
                del self.requests[ev.request_id]
                if self.metrics is not None:
                    self.metrics.on_finish(
                        req.num_output, now - req.arrival, now - req.first_token, finish
                    )

    @staticmethod
    def _send(req: _Request, delta: RequestDelta) -> None:
        req.num_sent += 1
        try:
            req.loop.call_soon_threadsafe(req.out.put_nowait, delta)
        except (
            RuntimeError
        ):  # the event loop is closed (the server is shutting down): nobody is listening
            pass
