"""server.py — an OpenAI-compatible HTTP server over the engine: FastAPI routes, uvicorn, SSE streams.

    python -m minillm serve                              # the tiny model on http://127.0.0.1:8000/v1
    python -m minillm serve --model /path/to/Qwen3-0.6B --port 8001 --api-key secret

Routes (OpenAI's paths, as `vllm serve` has them): POST /v1/completions, POST /v1/chat/completions,
GET /v1/models, and GET /health; plus two of this book's for watching the engine: GET /stats (the
block pool and queues) and GET /step_log (which requests each recent step ran together).

A handler validates the body (pydantic, openai_protocol.py), tokenizes (chat: the checkpoint's chat
template first), checks the length against the model's context, and submits the request to the
AsyncEngine. A non-streamed request waits for its last delta and answers with the whole text; a
streamed one answers with server-sent events, one `data: {chunk}` per step that produced text, and
`data: [DONE]`. When a streaming client goes away, Starlette cancels the response's generator, and
its `finally` aborts the request: its blocks are free before the next step. A non-streamed request
watches for the disconnect itself (`_unless_disconnected`) and aborts the same way.

The handler's tokenizer is a second copy of the engine's: Hugging Face's fast tokenizers are not
safe to call from two threads at once, and the engine thread decodes while handlers encode.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from minillm.async_engine import AsyncEngine
from minillm.engine import LLMEngine
from minillm.openai_protocol import (ChatCompletionRequest, CompletionRequest, chat_body, chat_chunk, completion_body,
                                     completion_chunk, error_body, new_id, usage_chunk, validation_error)
from minillm.prompts import prompt_ids


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


class _EventStream(StreamingResponse):
    """Closes its generator however the response ends, so its `finally` (the abort) runs at once: with
    ASGI 2.4 servers a vanished client shows up as an error from `send`, which leaves it suspended."""

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


async def _until_disconnect(request: Request) -> None:
    """Return when the client has gone away (the ASGI server sends "http.disconnect")."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work):
    """Run `work` (a coroutine) but cancel it if the client leaves first; None then. Like vLLM's
    `with_cancellation` (vllm/entrypoints/utils.py): a non-streamed request whose client has gone
    must not keep its blocks and steps until max_tokens."""
    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(_until_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        return task.result() if task in done else None
    finally:
        for t in (task, watch):
            t.cancel()


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status)


def create_app(engine: LLMEngine, model_name: str, api_key: str | None = None, chat_tokenizer=None) -> FastAPI:
    """The FastAPI app serving `engine` as `model_name`. chat_tokenizer: the handlers' tokenizer (None: a copy)."""
    front: AsyncEngine | None = None
    tokenizer = chat_tokenizer
    if tokenizer is None and engine.tokenizer is not None:
        import copy

        tokenizer = copy.deepcopy(engine.tokenizer)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        nonlocal front
        front = app.state.front = AsyncEngine(engine)  # the engine thread lives as long as the server
        try:
            yield
        finally:
            front.shutdown()

    app = FastAPI(title="minillm", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError):
        return JSONResponse(validation_error(list(exc.errors())), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError):
        return _error(exc.status, exc.message, exc.param)

    @app.middleware("http")
    async def check_api_key(request: Request, call_next):
        # vLLM's --api-key guards the /v1 routes; /health stays open for load balancers
        if api_key is not None and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return _error(401, "missing or wrong API key: expected the header 'Authorization: Bearer <key>'")
        return await call_next(request)

    @app.get("/health")
    async def health():
        if front is None or front.error is not None or not front.thread.is_alive():
            return _error(503, f"the engine thread is not running: {front.error if front else None!r}")
        return {"status": "ok"}

    @app.get("/stats")
    async def stats():
        return front.stats()

    @app.get("/step_log")
    async def step_log(last: int = 200):
        steps = list(front.step_log)[-max(0, last):]
        return {"steps": [{"step": s.step, "time": s.time, "seconds": s.seconds,
                           "chunks": [{"request_id": r, "kind": k, "num_new": n} for r, k, n in s.chunks]}
                          for s in steps]}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "minillm",
                                            "max_model_len": engine.max_model_len}]}

    def check_model(name: str) -> None:
        if name != model_name:
            raise RequestError(404, f"The model {name!r} does not exist: this server serves {model_name!r}", "model")

    def check_length(ids: list[int], req) -> None:
        params = req.sampling_params(engine.get_default_sampling_params())
        limit = engine.max_model_len
        if len(ids) >= limit:
            raise RequestError(400, f"prompt is {len(ids)} tokens: expected fewer than the model's context of "
                               f"{limit} tokens", "prompt")
        if len(ids) + params.max_tokens > limit:
            field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
            raise RequestError(400, f"{field} is {params.max_tokens}, and with the prompt's {len(ids)} tokens that is "
                               f"{len(ids) + params.max_tokens}: expected at most the model's context of {limit} "
                               "tokens in all", field)
        bad = next((t for t in params.stop_token_ids if t >= engine.model.cfg.vocab_size), None)
        if bad is not None:
            raise RequestError(400, f"stop_token_ids holds {bad}: expected ids < {engine.model.cfg.vocab_size}",
                               "stop_token_ids")

    async def run(req, ids: list[int], rid: str):
        """Submit and wait for the first delta, so a refused request is still a 400, not a broken stream."""
        check_length(ids, req)
        params = req.sampling_params(engine.get_default_sampling_params())
        stream = await front.submit(ids, params, req.stop_strings, request_id=rid, cache_salt=req.cache_salt)
        try:
            first = await stream.__anext__()
        except BaseException:
            stream.abort()
            raise
        if first.error is not None:
            raise RequestError(400, first.error, "prompt" if first.error.startswith(("prompt", "request")) else None)
        return stream, first

    async def deltas(stream, first):
        yield first
        async for d in stream:
            if d.error is not None:
                raise RuntimeError(d.error)
            yield d

    def sse(chunks):
        async def body():
            try:
                async for chunk in chunks:
                    yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                await chunks.aclose()
        return _EventStream(body(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        check_model(req.model)
        try:
            ids = prompt_ids(req.prompt, tokenizer, engine.model.cfg.vocab_size)
        except ValueError as e:
            raise RequestError(400, str(e), "prompt") from None
        rid = new_id("cmpl")
        stream, first = await run(req, ids, rid)
        tids = req.return_token_ids
        if not req.stream:
            async def collect():
                text, token_ids, last = "", [], None
                async for d in deltas(stream, first):
                    text, last = text + d.text, d
                    token_ids += d.token_ids
                return completion_body(rid, req.model, text, last.finish_reason, last.num_prompt_tokens,
                                       last.num_output_tokens, token_ids if tids else None)
            try:
                return await _unless_disconnected(request, collect())
            finally:
                stream.abort()  # a no-op once finished; frees the blocks if the client left

        async def chunks():
            last = None
            try:
                async for d in deltas(stream, first):
                    last = d
                    if d.text or d.finish_reason or tids:
                        yield completion_chunk(rid, req.model, d.text, d.finish_reason, d.token_ids if tids else None)
                if req.stream_options and req.stream_options.include_usage:
                    yield usage_chunk(rid, req.model, "text_completion", last.num_prompt_tokens, last.num_output_tokens)
            finally:
                stream.abort()  # the client went away mid-stream: stop the request, free its blocks
        return sse(chunks())

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request):
        check_model(req.model)
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise RequestError(400, "this model has no chat template (tokenizer_config.json has no chat_template): "
                               "use /v1/completions", "messages")
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = list(tokenizer(text, add_special_tokens=False).input_ids)
        rid = new_id("chatcmpl")
        stream, first = await run(req, ids, rid)
        tids = req.return_token_ids
        if not req.stream:
            async def collect():
                out, last = "", None
                async for d in deltas(stream, first):
                    out, last = out + d.text, d
                return chat_body(rid, req.model, out, last.finish_reason, last.num_prompt_tokens,
                                 last.num_output_tokens)
            try:
                return await _unless_disconnected(request, collect())
            finally:
                stream.abort()

        async def chunks():
            last = None
            try:
                yield chat_chunk(rid, req.model, {"role": "assistant", "content": ""})
                async for d in deltas(stream, first):
                    last = d
                    if d.text or d.finish_reason or tids:
                        yield chat_chunk(rid, req.model, {"content": d.text} if d.text else {}, d.finish_reason,
                                         d.token_ids if tids else None)
                if req.stream_options and req.stream_options.include_usage:
                    yield usage_chunk(rid, req.model, "chat.completion.chunk", last.num_prompt_tokens,
                                      last.num_output_tokens)
            finally:
                stream.abort()
        return sse(chunks())

    return app


def serve(model: str | Path | None = None, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          served_model_name: str | None = None, max_num_seqs: int = 16, max_num_batched_tokens: int = 512,
          enable_prefix_caching: bool = False, log_level: str = "warning") -> None:
    """Load the model, build the app and run it with uvicorn until Ctrl-C (or SIGTERM)."""
    import uvicorn

    from minillm.checkpoints import resolve_model

    path = resolve_model(model)  # a folder, `smollm2`, or None: the default model
    engine = LLMEngine(path, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                       enable_prefix_caching=enable_prefix_caching)
    name = served_model_name or path.name
    app = create_app(engine, name, api_key)
    print(f"minillm serve: {name} ({path}) on http://{host}:{port}/v1"
          f"{' (API key required)' if api_key else ''}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
