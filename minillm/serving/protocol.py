"""serving/protocol.py — the request and response shapes of OpenAI's API, and its error JSON.

Requests are pydantic models (vLLM's `protocol.py` does the same), so FastAPI turns a bad body into
a list of errors that name the field; `error_body` turns one into OpenAI's error object:

    {"error": {"message": "temperature: Input should be less than or equal to 2", "type":
               "invalid_request_error", "param": "temperature", "code": 400}}

Fields the engine cannot honour are refused with a 400 rather than ignored (`n` > 1, logprobs, tools),
and so are fields OpenAI does not define (a typo must not pass silently). A few of vLLM's extensions
are accepted: `top_k`, `ignore_eos`, `stop_token_ids`, `cache_salt` (chapter 7's prefix-cache salt) and
`return_token_ids` (each chunk then carries the ids it covers, which is how `bench-serve` counts
tokens on a model without a tokenizer).
"""

from __future__ import annotations

import time
import uuid
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, conlist, field_validator

from minillm.sampling import SamplingParams


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: StrictBool = False


class SamplingFields(BaseModel):
    """The fields completions and chat completions share."""

    model_config = ConfigDict(extra="forbid")
    model: StrictStr
    max_tokens: Optional[StrictInt] = Field(None, ge=1)
    max_completion_tokens: Optional[StrictInt] = Field(None, ge=1)  # chat's newer name for max_tokens
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    top_k: Optional[StrictInt] = Field(None, ge=0)  # vLLM's extension; 0 (and OpenAI's absence) keeps all
    seed: Optional[StrictInt] = Field(None, ge=0)
    stop: Optional[Union[StrictStr, conlist(StrictStr, max_length=16)]] = None
    stop_token_ids: Optional[list[StrictInt]] = None
    ignore_eos: StrictBool = False
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    n: StrictInt = Field(1, ge=1, le=1)  # one choice per request here
    user: Optional[StrictStr] = None
    return_token_ids: StrictBool = False
    cache_salt: Optional[StrictStr] = Field(None, min_length=1)  # vLLM's: only equal salts share cached blocks

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, v):
        if v == "" or (isinstance(v, list) and "" in v):
            raise ValueError("a stop string must not be empty")
        return v

    @field_validator("stop_token_ids")
    @classmethod
    def _ids_non_negative(cls, v):
        if v is not None and any(t < 0 for t in v):
            raise ValueError("token ids are >= 0")
        return v

    def sampling_params(self, defaults: SamplingParams) -> SamplingParams:
        """The engine's SamplingParams: fields the request leaves out come from the checkpoint's defaults."""
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        return SamplingParams(
            max_tokens=max_tokens if max_tokens is not None else defaults.max_tokens,
            temperature=self.temperature if self.temperature is not None else defaults.temperature,
            top_p=self.top_p if self.top_p is not None else defaults.top_p,
            top_k=self.top_k if self.top_k is not None else defaults.top_k,
            stop_token_ids=tuple(self.stop_token_ids or ()), seed=self.seed, ignore_eos=self.ignore_eos)

    @property
    def stop_strings(self) -> list[str]:
        return [] if self.stop is None else [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionRequest(SamplingFields):
    # one prompt: a string, a list of token ids, or a list holding exactly one of either (OpenAI's batch form)
    prompt: Union[StrictStr, list[StrictInt], conlist(StrictStr, min_length=1, max_length=1),
                  conlist(list[StrictInt], min_length=1, max_length=1)]
    echo: Literal[False] = False
    logprobs: Literal[None] = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list) and v and isinstance(v[0], (str, list)):
            v = v[0]
        if len(v) == 0:
            raise ValueError("the prompt is empty")
        return v


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant", "developer"]
    content: StrictStr
    name: Optional[StrictStr] = None


class ChatCompletionRequest(SamplingFields):
    messages: conlist(ChatMessage, min_length=1)
    logprobs: Literal[False, None] = None


# ---- responses: plain dicts in OpenAI's shapes (the openai client parses them) ----------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(num_prompt: int, num_output: int) -> dict:
    return {"prompt_tokens": num_prompt, "completion_tokens": num_output, "total_tokens": num_prompt + num_output}


def completion_body(rid, model, text, finish_reason, num_prompt, num_output, token_ids=None) -> dict:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [choice], "usage": usage(num_prompt, num_output)}


def completion_chunk(rid, model, text, finish_reason=None, token_ids=None) -> dict:
    body = completion_body(rid, model, text, finish_reason, 0, 0, token_ids)
    body["usage"] = None
    return body


def chat_body(rid, model, text, finish_reason, num_prompt, num_output) -> dict:
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": finish_reason}], "usage": usage(num_prompt, num_output)}


def chat_chunk(rid, model, delta: dict, finish_reason=None, token_ids=None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [choice], "usage": None}


def usage_chunk(rid, model, obj: str, num_prompt: int, num_output: int) -> dict:
    """The last chunk when stream_options.include_usage is set: no choices, only the counts."""
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": [],
            "usage": usage(num_prompt, num_output)}


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               500: "server_error", 503: "server_error"}


def error_body(status: int, message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": status}}


def validation_error(errors: list[dict]) -> dict:
    """FastAPI's list of pydantic errors as one OpenAI error naming the first bad field."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    # pydantic adds the union member it tried ("str", "list[int]") to the location: keep the field's path
    loc = [p for p in loc if not any(ch in p for ch in "[]") and p not in ("str", "int", "float", "bool")]
    param = ".".join(loc) or None
    extra = " (not a field of this request)" if first.get("type") == "extra_forbidden" else ""
    message = f"{param}: {first.get('msg', 'invalid')}{extra}" if param else first.get("msg", "invalid request")
    return error_body(400, message, param)
