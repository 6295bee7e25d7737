"""serving/streams.py — between the engine thread's deltas and the client's bytes: the choices
of one response merged into one sequence, server-sent events, and what a disconnect ends.

    pairs = [(stream, first_delta), ...]            # one RequestStream per choice
    async for k, delta in merge_choices(pairs): ... # in the order the steps produce them
    return event_stream(chunks())                   # data: {json} ... data: [DONE]

A streaming client that goes away: Starlette cancels the response, `EventStream` closes its
body generator, and the `finally` blocks run down the chain to `merge_choices`, which aborts
every choice's request, so its blocks are free before the next step. A non-streamed request has
no body to cancel yet, so `unless_disconnected` watches for the disconnect itself (vLLM's
`with_cancellation`, vllm/entrypoints/serve/utils/api_utils.py in vLLM 0.34.0).
"""

from __future__ import annotations

import asyncio
import json
import time

from fastapi import Request
from fastapi.responses import StreamingResponse


class FirstWrite:
    """Pure ASGI middleware, outside FastAPI's: as the response's first body bytes go to
    uvicorn, which writes them to the socket at once (unless the socket is full), it calls
    `request.state.on_first_write(perf_counter)`, if a handler set one. The time is read
    before the write: read after it, it could wait for the engine thread to release the GIL."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})  # the dict behind every `request.state`

        async def timed(message):
            if message["type"] == "http.response.body" and message.get("body"):
                note = state.pop("on_first_write", None)
                if note is not None:
                    note(time.perf_counter())
            await send(message)

        await self.app(scope, receive, timed)


class EventStream(StreamingResponse):
    """Closes its generator however the response ends, so its `finally` (the abort) runs at
    once: with ASGI 2.4 servers a vanished client shows up as an error from `send`, which
    would leave the generator suspended."""

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


def event_stream(chunks) -> EventStream:
    """Server-sent events: one `data: {json}` event per chunk (a blank line ends an event), then
    `data: [DONE]`, as OpenAI's streaming API frames them."""

    async def body():
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            await chunks.aclose()  # the handler's generator, and merge_choices' abort, run now

    return EventStream(body(), media_type="text/event-stream")


async def merge_choices(pairs):
    """(choice index, delta) from every (RequestStream, first delta) pair, in the order the
    steps produce them; aborts every choice's request on exit, however it exits."""
    # bounded: a pump reads its stream only as fast as the response is written, so a slow
    # reader's backlog stays in its RequestStream, where the engine thread counts it
    queue: asyncio.Queue = asyncio.Queue(maxsize=len(pairs))

    async def pump(k, stream, first):
        await queue.put((k, first))
        async for d in stream:
            await queue.put((k, d))
        await queue.put((k, None))

    tasks = [asyncio.ensure_future(pump(k, s, f)) for k, (s, f) in enumerate(pairs)]
    try:
        left = len(pairs)
        while left:
            k, d = await queue.get()
            if d is None:
                left -= 1
            elif d.error is not None:
                raise RuntimeError(d.error)
            else:
                yield k, d
    finally:
        for t in tasks:
            t.cancel()
        for s, _ in pairs:
            s.abort()  # a no-op once finished; frees the blocks if the client left


async def until_disconnect(request: Request) -> None:
    """Return when the client has gone away (the ASGI server sends "http.disconnect")."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work):
    """Run `work` (a coroutine) but cancel it if the client leaves first; None then: a
    non-streamed request whose client has gone must not keep its blocks and steps until
    max_tokens."""
    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(until_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        return task.result() if task in done else None
    finally:
        for t in (task, watch):
            t.cancel()
