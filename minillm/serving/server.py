"""serving/server.py — an OpenAI-compatible HTTP server over the engine: FastAPI routes,
uvicorn, SSE streams.

    python -m minillm serve                 # the tiny model on http://127.0.0.1:8000/v1
    python -m minillm serve --model smollm2 --port 8001 --api-key secret

Routes (OpenAI's paths, as `vllm serve` has them): POST /v1/completions, POST
/v1/chat/completions, GET /v1/models, GET /v1/models/{id}; vLLM's GET /health, /metrics
(Prometheus), /version, /tokenizer_info and POST /tokenize, /detokenize; plus three of this
book's for watching the engine: GET /stats (the block pool and queues), GET /step_log (which
requests each recent step ran together) and GET /request_log (when each recent request was
received, submitted, taken between steps, first scheduled and given its first token, when that
token's delta reached the handler and its bytes uvicorn, and when an abort was queued and
applied; `started` converts these to any process's perf_counter on this machine). With
--api-key, everything but /health, /metrics and /version needs the key.

A handler validates the body (pydantic, serving/protocol.py), tokenizes (chat: the checkpoint's
chat template first) on a worker thread, so a long prompt never stalls the event loop, checks
the length against the model's context, and submits the request to the AsyncEngine.

A completions `prompt` may hold several prompts (OpenAI's list forms), and `n` asks for n
samples of each: every (prompt, sample) pair is its own engine request, all submitted at once so
they share steps, and choice `index = prompt_index * n + sample_index`. Sample i > 0 is a fork
of sample 0 (LLMEngine's fork_of): it shares the prompt's full KV blocks by reference count
instead of computing them, and its seed is seed + i. `usage` counts each prompt once and every
choice's tokens. A stream with several choices interleaves their chunks as the steps produce
them, each chunk carrying its choice's `index`, then one usage chunk for all (what vLLM and
OpenAI do).

`echo` with `logprobs` (what eval harnesses send to score text) returns the prompt too: its
text, and each prompt token's logprob from the prefill (the first one null), then the generated
tokens'; `max_tokens: 0` returns the prompt alone.

A non-streamed request waits for its last delta and answers with the whole text; a
streamed one answers with server-sent events, one `data: {chunk}` per step that produced text,
and `data: [DONE]`. serving/streams.py merges the choices, frames the events and turns a
disconnect into an abort, streamed or not.

The handler's tokenizer is a second copy of the engine's: Hugging Face's fast tokenizers are not
safe to call from two threads at once, and the engine thread decodes while handlers encode; the
handlers' copy runs on one worker thread of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import secrets
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from minillm import __version__
from minillm.engine import LLMEngine, child_params
from minillm.prompts import prompt_ids
from minillm.serving.async_engine import AsyncEngine
from minillm.serving.metrics import ServerMetrics
from minillm.serving.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    FieldError,
    TokenizeRequest,
    chat_body,
    chat_choice,
    chat_chunk,
    chat_logprobs,
    completion_body,
    completion_choice,
    completion_logprobs,
    error_body,
    new_id,
    usage,
    usage_chunk,
    validation_error,
)
from minillm.serving.streams import FirstWrite, event_stream, merge_choices, unless_disconnected

OPEN_PATHS = (
    "/health",
    "/metrics",
    "/version",
)  # without the API key, as in vLLM (load balancers, Prometheus)


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status)


class _Choice:
    """One choice's output as its deltas arrive."""

    def __init__(self):
        self.text, self.token_ids, self.logprobs, self.prompt_logprobs = "", [], [], None
        self.finish_reason, self.num_output = None, 0

    def add(self, d) -> None:
        self.text += d.text
        self.token_ids += d.token_ids
        self.logprobs += d.logprobs or []
        if d.prompt_logprobs is not None:
            self.prompt_logprobs = d.prompt_logprobs
        self.finish_reason = d.finish_reason or self.finish_reason
        self.num_output = d.num_output_tokens


def create_app(
    engine: LLMEngine,
    model_name: str,
    api_key: str | None = None,
    chat_tokenizer=None,
    max_unread_tokens: int = 1024,
) -> FastAPI:
    """The FastAPI app serving `engine` as `model_name`. chat_tokenizer: the handlers' tokenizer
    (None: a copy); max_unread_tokens: how far a streaming reader may fall behind before its
    request is aborted (AsyncEngine)."""
    front: AsyncEngine | None = None
    tokenizer = chat_tokenizer
    if tokenizer is None and engine.tokenizer is not None:
        import copy

        tokenizer = copy.deepcopy(engine.tokenizer)
    vocab_size = engine.model.cfg.vocab_size
    metrics = ServerMetrics(engine, model_name)
    # every use of the handlers' tokenizer runs here: off the event loop, and one call at a time
    tok_thread = concurrent.futures.ThreadPoolExecutor(
        1, thread_name_prefix="minillm-tokenizer"
    )

    async def off_loop(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(tok_thread, fn, *args)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        nonlocal front
        # the engine thread lives as long as the server
        front = app.state.front = AsyncEngine(engine, max_unread_tokens=max_unread_tokens)
        front.metrics = metrics
        try:
            yield
        finally:
            front.shutdown()
            tok_thread.shutdown(wait=False)

    app = FastAPI(
        title="minillm", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError):
        return JSONResponse(validation_error(list(exc.errors())), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError):
        return _error(exc.status, exc.message, exc.param)

    @app.exception_handler(FieldError)
    async def field_error(request: Request, exc: FieldError):
        return _error(400, str(exc), exc.param)

    @app.middleware("http")
    async def check_api_key(request: Request, call_next):
        # the first code to see a request: the request log's `received` (handlers read it)
        request.state.received = time.perf_counter()
        # vLLM's --api-key guards every route but the ones monitoring needs without a key
        if api_key is not None and request.url.path not in OPEN_PATHS:
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return _error(
                    401,
                    "missing or wrong API key: expected the header 'Authorization: Bearer "
                    "<key>'",
                )
        return await call_next(request)

    app.add_middleware(FirstWrite)  # outermost: sets the request log's `written`

    @app.get("/health")
    async def health():
        if front is None or front.error is not None or not front.thread.is_alive():
            return _error(
                503, f"the engine thread is not running: {front.error if front else None!r}"
            )
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/version")
    async def version():
        return {"version": __version__}

    @app.get("/stats")
    async def stats():
        return front.stats()

    @app.get("/step_log")
    async def step_log(last: int = 200):
        steps = list(front.step_log)[-max(0, last) :]
        return {
            "steps": [
                {
                    "step": s.step,
                    "time": s.time,
                    "seconds": s.seconds,
                    "chunks": [
                        {"request_id": r, "kind": k, "num_new": n} for r, k, n in s.chunks
                    ],
                }
                for s in steps
            ]
        }

    @app.get("/request_log")
    async def request_log(last: int = 200):
        """Each recent request's times (seconds since `started`), from received to written,
        and abort_queued and aborted for a request whose client left. `started` is the
        server's perf_counter at 0, which on Linux is CLOCK_MONOTONIC, shared by every
        process on the machine, so a client can place its own times on the same axis."""
        return {
            "started": front.started,
            "requests": [vars(r) for r in list(front.request_log)[-max(0, last) :]],
        }

    def model_card() -> dict:
        return {
            "id": model_name,
            "object": "model",
            "created": 0,
            "owned_by": "minillm",
            "max_model_len": engine.max_model_len,
        }

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        check_model(model_id)
        return model_card()

    @app.get("/tokenizer_info")
    async def tokenizer_info():
        """vLLM's route: the tokenizer's class and its tokenizer_config.json settings."""
        if tokenizer is None:
            raise RequestError(
                404, "this model has no tokenizer, so there is no /tokenizer_info"
            )
        plain = (str, int, float, bool, type(None))
        info = {k: v for k, v in tokenizer.init_kwargs.items() if isinstance(v, plain)}
        for k in ("eos_token", "bos_token", "pad_token", "unk_token"):
            info[k] = getattr(tokenizer, k, None)
        info.update(
            tokenizer_class=type(tokenizer).__name__,
            model_max_length=engine.max_model_len,
            chat_template=getattr(tokenizer, "chat_template", None),
        )
        return info

    def need_tokenizer(what: str) -> None:
        if tokenizer is None:
            raise RequestError(400, f"this model has no tokenizer: {what} needs one", "prompt")

    @app.post("/tokenize")
    async def tokenize(req: TokenizeRequest):
        check_model(req.model)
        need_tokenizer("/tokenize")
        if req.messages is not None:
            ids = await off_loop(chat_ids, req.messages, req.add_generation_prompt)
        else:
            ids = await off_loop(
                lambda: list(
                    tokenizer(req.prompt, add_special_tokens=req.add_special_tokens).input_ids
                )
            )
        return {
            "count": len(ids),
            "max_model_len": engine.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }

    @app.post("/detokenize")
    async def detokenize(req: DetokenizeRequest):
        check_model(req.model)
        need_tokenizer("/detokenize")
        bad = next((t for t in req.tokens if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise RequestError(
                400, f"tokens holds {bad}: expected ids in [0, {vocab_size})", "tokens"
            )
        return {"prompt": await off_loop(tokenizer.decode, req.tokens)}

    def check_model(name: str | None) -> None:
        if name is not None and name != model_name:
            raise RequestError(
                404,
                f"The model {name!r} does not exist: this server serves {model_name!r}",
                "model",
            )

    def sampling_params(req, **kw):
        try:
            params = req.sampling_params(engine.get_default_sampling_params(), **kw)
        except FieldError:  # response_format, structured_outputs: it names its own field
            raise
        except (
            ValueError
        ) as e:  # a value pydantic let through and SamplingParams refuses: it names its field
            raise RequestError(400, str(e), str(e).split()[0]) from None
        bad = next((t for t, _ in params.logit_bias if t >= vocab_size), None)
        if bad is not None:
            raise RequestError(
                400,
                f"logit_bias names token id {bad}: expected ids < {vocab_size}",
                "logit_bias",
            )
        return params

    def check_length(ids: list[int], params, req) -> None:
        limit = engine.max_model_len
        if len(ids) >= limit:
            raise RequestError(
                400,
                f"prompt is {len(ids)} tokens: expected fewer than the model's context of "
                f"{limit} tokens",
                "prompt",
            )
        if len(ids) + params.max_tokens > limit:
            field = (
                "max_completion_tokens"
                if req.max_completion_tokens is not None
                else "max_tokens"
            )
            raise RequestError(
                400,
                f"{field} is {params.max_tokens}, and with the prompt's {len(ids)} tokens "
                "that is "
                f"{len(ids) + params.max_tokens}: expected at most the model's context of "
                f"{limit} "
                "tokens in all",
                field,
            )
        bad = next((t for t in params.stop_token_ids if t >= vocab_size), None)
        if bad is not None:
            raise RequestError(
                400,
                f"stop_token_ids holds {bad}: expected ids < {vocab_size}",
                "stop_token_ids",
            )

    async def start(req, prompts: list[list[int]], params, rid: str, request: Request) -> list:
        """Submit every (prompt, sample) pair at once; wait for each first delta, so a refused
        one is a 400."""
        fork = (
            params.prompt_logprobs is None
        )  # prompt logprobs need every prompt row computed: no sharing
        streams, one = [], len(prompts) * params.n == 1
        sub = lambda i, j: rid if one else f"{rid}-{i}-{j}"  # noqa: E731 - the engine's id of one choice
        try:
            for i, ids in enumerate(prompts):
                for j in range(params.n):
                    streams.append(
                        await front.submit(
                            ids,
                            child_params(params, j),
                            req.stop_strings,
                            request_id=sub(i, j),
                            cache_salt=req.cache_salt,
                            fork_of=sub(i, 0) if j and fork else None,
                            received=request.state.received,
                        )
                    )
            firsts = [await s.__anext__() for s in streams]

            def written(t: float) -> None:  # the response's first bytes went to uvicorn
                for s in streams:
                    if s.times is not None:
                        s.times.written = t - front.started

            request.state.on_first_write = written
        except BaseException:
            for s in streams:
                s.abort()
            raise
        bad = next((f for f in firsts if f.error is not None), None)
        if bad is not None:
            for s in streams:
                s.abort()
            raise RequestError(
                400,
                bad.error,
                "prompt"
                if bad.error.startswith(("prompt", "request"))
                else "structured_outputs"
                if bad.error.startswith("structured_outputs")
                else None,
            )
        return list(zip(streams, firsts))

    def token_text(t: int) -> str:
        return tokenizer.decode([t]) if tokenizer is not None else f"token_id:{t}"

    def completion_lp(ids, entries, offset):
        return completion_logprobs([token_text(t) for t in ids], entries, token_text, offset)

    def chat_lp(ids, entries):
        return chat_logprobs([token_text(t) for t in ids], entries, token_text)

    def encode(p) -> list[int]:
        return prompt_ids(p, tokenizer, vocab_size)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        check_model(req.model)
        req.check_fields()
        if req.max_tokens == 0 and not req.echo:
            raise RequestError(
                400,
                "max_tokens is 0: expected an int >= 1 (0 only with echo, to score the prompt "
                "alone)",
                "max_tokens",
            )
        prompts = []
        for i, p in enumerate(req.prompt):
            try:
                prompts.append(await off_loop(encode, p) if isinstance(p, str) else encode(p))
            except ValueError as e:
                where = f"prompt[{i}]: " if len(req.prompt) > 1 else ""
                raise RequestError(400, where + str(e), "prompt") from None
        want_lp, echo_only = req.logprobs is not None, req.max_tokens == 0
        params = sampling_params(
            req,
            logprobs=req.logprobs,
            prompt_logprobs=req.logprobs if req.echo and want_lp else None,
        )
        for ids in prompts:
            check_length(ids, params, req)
        echo = [
            (p if isinstance(p, str) else await off_loop(tokenizer.decode, ids))
            if req.echo and tokenizer
            else ""
            for p, ids in zip(req.prompt, prompts)
        ]
        rid, n, name = new_id("cmpl"), params.n, req.model or model_name
        pairs = await start(req, prompts, params, rid, request)
        tids = req.return_token_ids

        async def lp_for(k: int, c: _Choice, first: bool, new_ids, new_lps, offset):
            if not want_lp:
                return None
            ids, entries = list(new_ids), list(new_lps)
            if first and req.echo:
                ids, entries = prompts[k // n] + ids, c.prompt_logprobs + entries
            return await off_loop(completion_lp, ids, entries, offset)

        if not req.stream:

            async def collect():
                outs = [_Choice() for _ in pairs]
                async with contextlib.aclosing(merge_choices(pairs)) as merged:
                    async for k, d in merged:
                        outs[k].add(d)
                choices = []
                for k, c in enumerate(outs):
                    # max_tokens 0: the prompt alone (the engine ran one token, dropped here)
                    if echo_only:
                        c.text, c.token_ids, c.logprobs, c.num_output, c.finish_reason = (
                            "",
                            [],
                            [],
                            0,
                            "length",
                        )
                    lp = await lp_for(k, c, True, c.token_ids, c.logprobs, 0)
                    choices.append(
                        completion_choice(
                            k,
                            echo[k // n] + c.text,
                            c.finish_reason,
                            lp,
                            c.token_ids if tids else None,
                        )
                    )
                num_out = sum(c.num_output for c in outs)
                return completion_body(
                    rid, name, choices, usage(sum(map(len, prompts)), num_out)
                )

            return await unless_disconnected(request, collect())

        async def chunks():
            outs, offsets, started = [_Choice() for _ in pairs], [0] * len(pairs), set()
            num_prompt = sum(map(len, prompts))
            # aclosing: an `async for` leaves the generator suspended when the loop is left
            # early; closing it here runs merge_choices' `finally` (the aborts) at once
            async with contextlib.aclosing(merge_choices(pairs)) as merged:
                async for k, d in merged:
                    c, first = outs[k], k not in started
                    started.add(k)
                    c.add(d)
                    text, ids, lps = d.text, d.token_ids, d.logprobs or []
                    if echo_only:
                        text, ids, lps, c.num_output = "", [], [], 0
                        d.finish_reason = "length"
                    text = (echo[k // n] if first else "") + text
                    lp = await lp_for(k, c, first, ids, lps, offsets[k])
                    if lp is not None:
                        offsets[k] = (
                            lp["text_offset"][-1] + len(lp["tokens"][-1])
                            if lp["tokens"]
                            else offsets[k]
                        )
                    if text or d.finish_reason or tids or lp:
                        u = (
                            usage(num_prompt, sum(o.num_output for o in outs))
                            if req.usage_every_chunk
                            else None
                        )
                        yield completion_body(
                            rid,
                            name,
                            [
                                completion_choice(
                                    k, text, d.finish_reason, lp, ids if tids else None
                                )
                            ],
                            u,
                        )
            if req.stream_options and req.stream_options.include_usage:
                yield usage_chunk(
                    rid, name, "text_completion", num_prompt, sum(o.num_output for o in outs)
                )

        return event_stream(chunks())

    def chat_ids(messages, add_generation_prompt: bool = True) -> list[int]:
        text = tokenizer.apply_chat_template(
            [
                m.model_dump(include={"role", "content", "name"}, exclude_none=True)
                for m in messages
            ],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request):
        check_model(req.model)
        req.check_fields()
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise RequestError(
                400,
                "this model has no chat template (tokenizer_config.json has no chat_template): "
                "use /v1/completions",
                "messages",
            )
        if req.top_logprobs is not None and not req.logprobs:
            raise RequestError(
                400,
                f"top_logprobs is {req.top_logprobs}: it needs logprobs set to true",
                "top_logprobs",
            )
        ids = await off_loop(chat_ids, req.messages)
        # no max_tokens: the rest of the context, as vLLM does (and what the pool can hold at
        # most)
        room = min(
            engine.max_model_len, engine.scheduler.pool.num_blocks * engine.block_size + 1
        ) - len(ids)
        params = sampling_params(
            req,
            max_tokens=max(1, room),
            logprobs=(req.top_logprobs or 0) if req.logprobs else None,
        )
        check_length(ids, params, req)
        rid, name = new_id("chatcmpl"), req.model or model_name
        pairs = await start(req, [ids], params, rid, request)
        tids = req.return_token_ids
        if not req.stream:

            async def collect():
                outs = [_Choice() for _ in pairs]
                async with contextlib.aclosing(merge_choices(pairs)) as merged:
                    async for k, d in merged:
                        outs[k].add(d)
                choices = [
                    chat_choice(
                        k,
                        c.text,
                        c.finish_reason,
                        await off_loop(chat_lp, c.token_ids, c.logprobs)
                        if req.logprobs
                        else None,
                    )
                    for k, c in enumerate(outs)
                ]
                return chat_body(
                    rid, name, choices, usage(len(ids), sum(c.num_output for c in outs))
                )

            return await unless_disconnected(request, collect())

        async def chunks():
            outs = [_Choice() for _ in pairs]
            for k in range(len(pairs)):
                yield chat_chunk(rid, name, k, {"role": "assistant", "content": ""})
            # aclosing: an `async for` leaves the generator suspended when the loop is left
            # early; closing it here runs merge_choices' `finally` (the aborts) at once
            async with contextlib.aclosing(merge_choices(pairs)) as merged:
                async for k, d in merged:
                    outs[k].add(d)
                    lp = (
                        await off_loop(chat_lp, d.token_ids, d.logprobs)
                        if req.logprobs
                        else None
                    )
                    if d.text or d.finish_reason or tids or lp:
                        u = (
                            usage(len(ids), sum(o.num_output for o in outs))
                            if req.usage_every_chunk
                            else None
                        )
                        yield chat_chunk(
                            rid,
                            name,
                            k,
                            {"content": d.text} if d.text else {},
                            d.finish_reason,
                            d.token_ids if tids else None,
                            lp,
                            u,
                        )
            if req.stream_options and req.stream_options.include_usage:
                yield usage_chunk(
                    rid,
                    name,
                    "chat.completion.chunk",
                    len(ids),
                    sum(o.num_output for o in outs),
                )

        return event_stream(chunks())

    return app


def serve(
    model: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    served_model_name: str | None = None,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 512,
    enable_prefix_caching: bool = False,
    log_level: str = "warning",
    max_model_len: int | None = None,
    max_unread_tokens: int = 1024,
) -> None:
    """Load the model, build the app and run it with uvicorn until Ctrl-C (or SIGTERM)."""
    import uvicorn

    from minillm.checkpoints import resolve_model

    path = resolve_model(model)  # a folder, `smollm2`, or None: the default model
    engine = LLMEngine(
        path,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_prefix_caching=enable_prefix_caching,
        max_model_len=max_model_len,
    )
    name = served_model_name or path.name
    app = create_app(engine, name, api_key, max_unread_tokens=max_unread_tokens)
    print(
        f"minillm serve: {name} ({path}) on http://{host}:{port}/v1"
        f"{' (API key required)' if api_key else ''}",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)
